"""`tiersim compare`: the host memory timeline's figures, and one lifetime row where the drive's
rating binds. Expected values are read off the two runs' own report.json files."""

import json

from conftest import SCENARIOS
from docs_text import page

from tiersim.core.units import DAY_S, YEAR_S

ZERO = SCENARIOS / "zero-offload-10b-dgx2.yaml"
DEFAULT = SCENARIOS / "default.yaml"
HOST = "host_memory_timeline"


def _run(cli, folder, scenario, *overrides):
    sets = [a for o in overrides for a in ("--set", o)]
    code, out, err = cli("run", scenario, "--format", "json", "--out", folder, *sets)
    assert code == 0, err
    return json.loads(out)


def _compare(cli, a, b):
    code, out, err = cli("compare", a, b, "--format", "json")
    assert code == 0, err
    code, table, err = cli("compare", a, b)
    assert code == 0, err
    return {r["path"]: r for r in json.loads(out)["outputs"]}, table


def test_host_timeline_figures_that_moved_are_compared(cli, tmp_path):
    # B: the optimizer on the GPU, its state still homed in DRAM: the host peaks elsewhere and
    # lower; C: 10 GB of host memory a GPU, less than the 8.99 GB of state + pinned rounding
    # homed there at the start (docs/memory.md): it runs out
    a = _run(cli, tmp_path / "a", ZERO)
    b = _run(cli, tmp_path / "b", ZERO, "placement.optimizer_compute=gpu")
    c = _run(cli, tmp_path / "c", ZERO, "hardware.tiers.dram.capacity=10 GB")
    ha, hb, hc = a[HOST], b[HOST], c[HOST]
    moved, table = _compare(cli, tmp_path / "a", tmp_path / "b")
    assert ha["peak_moment"] != hb["peak_moment"]  # the case tests a moving moment
    row = moved[f"{HOST}.peak_moment"]
    assert (row["a"], row["b"]) == (ha["peak_moment"], hb["peak_moment"])
    row = moved[f"{HOST}.peak_bytes"]
    assert (row["a"], row["b"]) == (ha["peak_bytes"], hb["peak_bytes"])
    assert row["delta"] == hb["peak_bytes"] - ha["peak_bytes"]
    assert row["ratio"] == hb["peak_bytes"] / ha["peak_bytes"]
    row = moved[f"{HOST}.node.peak_bytes"]
    assert (row["a"], row["b"]) == (ha["node"]["peak_bytes"], hb["node"]["peak_bytes"])
    # the node's capacity and GPUs did not move: not listed
    assert f"{HOST}.node.capacity_bytes" not in moved and f"{HOST}.node.gpus" not in moved
    line = next(x for x in table.splitlines() if x.startswith(f"{HOST}.peak_moment "))
    assert ha["peak_moment"] in line and hb["peak_moment"] in line
    line = next(x for x in table.splitlines() if x.startswith(f"{HOST}.peak_bytes "))
    # 13.40 GB (docs/memory.md: zero-offload-10b-dgx2's host peak) in fmt_bytes' 2 decimals
    assert f"{ha['peak_bytes'] / 1e9:.2f} GB" in line and f"{hb['peak_bytes'] / 1e9:.2f} GB" in line
    # docs/commands.md quotes this comparison
    quoted = (
        f"the host's peak {ha['peak_bytes'] / 1e9:.2f} GB at `{ha['peak_moment']}` -> "
        f"{hb['peak_bytes'] / 1e9:.2f} GB at `{hb['peak_moment']}` "
        f"(x{hb['peak_bytes'] / ha['peak_bytes']:.4f}), the node's "
        f"{ha['node']['peak_bytes'] / 1e9:.2f} GB -> {hb['node']['peak_bytes'] / 1e9:.2f} GB"
    )
    assert quoted in " ".join(page("commands").split())

    moved, table = _compare(cli, tmp_path / "a", tmp_path / "c")
    assert ha["fits"] and not hc["fits"]
    assert moved[f"{HOST}.fits"]["a"] is True and moved[f"{HOST}.fits"]["b"] is False
    row = moved[f"{HOST}.out_of_memory_at"]
    assert row["a"] is None and row["b"] == hc["out_of_memory_at"] is not None
    row = moved[f"{HOST}.capacity_bytes"]
    assert (row["a"], row["b"]) == (96e9, 10e9)  # the DGX-2's 1.5 TB / 16 GPUs; 10 GB set
    # the node: 16 GPUs x 10 GB = 160 GB
    assert moved[f"{HOST}.node.capacity_bytes"]["b"] == 16 * 10e9 == hc["node"]["capacity_bytes"]
    line = next(x for x in table.splitlines() if x.startswith(f"{HOST}.out_of_memory_at "))
    assert hc["out_of_memory_at"] in line


def test_no_host_rows_where_neither_step_uses_host_memory():
    from tiersim.report.compare import compare

    # two reports without the section (a step that puts nothing in host memory) and one moved
    # step time: no host row
    a = {"fits": True, "step": {"time_s": 1.0}, "tiers": {}}
    b = {"fits": True, "step": {"time_s": 2.0}, "tiers": {}}
    paths = [r["path"] for r in compare({}, {}, a, b)["outputs"]]
    assert paths == ["step.time_s"]
    # where only B has it, its figures are listed as from nothing (-)
    b[HOST] = {"peak_bytes": 5, "peak_moment": "start of the step", "fits": True}
    rows = {r["path"]: r for r in compare({}, {}, a, b)["outputs"]}
    assert rows[f"{HOST}.peak_bytes"]["a"] is None and rows[f"{HOST}.peak_bytes"]["b"] == 5


def test_one_lifetime_row_where_the_drive_rating_binds(cli, tmp_path):
    faster = "hardware.tiers.hbf.write_bandwidth=100 GB/s"
    a = _run(cli, tmp_path / "a", DEFAULT)
    b = _run(cli, tmp_path / "b", DEFAULT, faster)
    moved, table = _compare(cli, tmp_path / "a", tmp_path / "b")
    # the DGX preset's NVMe is rated 1 drive write a day: its rating binds on both sides
    wa, wb = a["wear"]["nvme"], b["wear"]["nvme"]
    assert wa["lifetime_bound_by"] == wb["lifetime_bound_by"] == "rated"
    assert wa["lifetime_days"] == wa["rated_lifetime_days"] != wb["lifetime_days"]
    assert "wear.nvme.rated_lifetime_days" not in moved
    row = moved["wear.nvme.lifetime_days"]
    assert (row["a"], row["b"], row["bound_by"]) == (
        wa["lifetime_days"],
        wb["lifetime_days"],
        "rated",
    )
    assert "wear.nvme.lifetime_days (the drive's rating binds)" in table
    assert "rated_lifetime_days" not in table
    years = [w["lifetime_days"] * DAY_S / YEAR_S for w in (wa, wb)]
    quoted = f"the NVMe's rated lifetime {years[0]:.1f} years -> {years[1]:.1f} years"
    assert quoted in " ".join(page("commands").split())
    # HBF has no rating: its P/E cycles bind, one row, no word on what binds
    assert a["wear"]["hbf"]["lifetime_bound_by"] == "pe_cycles"
    assert "bound_by" not in moved["wear.hbf.lifetime_days"]


def test_both_lifetimes_stay_where_the_binding_one_changes():
    from tiersim.report.compare import compare

    # A: the rating binds (100 days rated < 300 days of P/E cycles); B: the cycles (50 < 80)
    wear_a = {"lifetime_days": 100.0, "rated_lifetime_days": 100.0, "lifetime_bound_by": "rated"}
    wear_b = {"lifetime_days": 50.0, "rated_lifetime_days": 80.0, "lifetime_bound_by": "pe_cycles"}
    a = {"fits": True, "step": {}, "tiers": {}, "wear": {"x": wear_a}}
    b = {"fits": True, "step": {}, "tiers": {}, "wear": {"x": wear_b}}
    rows = {r["path"]: r for r in compare({}, {}, a, b)["outputs"]}
    assert rows["wear.x.lifetime_bound_by"]["a"] == "rated"
    assert rows["wear.x.lifetime_bound_by"]["b"] == "pe_cycles"
    assert rows["wear.x.rated_lifetime_days"]["b"] == 80.0
    assert "bound_by" not in rows["wear.x.lifetime_days"]
