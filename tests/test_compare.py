"""`tiersim compare`: changed inputs and moved outputs, from scenarios and results folders."""

import contextlib
import io
import json
import math
import shlex

import pytest
from conftest import SCENARIOS
from docs_text import page

from tiersim.cli import main
from tiersim.core.units import Kind, parse

DEFAULT = SCENARIOS / "default.yaml"
FASTER = "hardware.tiers.hbf.write_bandwidth=100 GB/s"


@pytest.fixture(scope="module")
def faster_table() -> tuple[int, str, str]:
    """`tiersim compare DEFAULT --set FASTER` as a table, run once for the tests that read it:
    (code, out, err)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["compare", str(DEFAULT), "--set", FASTER])
    return code, out.getvalue(), err.getvalue()


def _json(cli, *args):
    code, out, err = cli("compare", *args, "--format", "json")
    assert code == 0, err
    return json.loads(out)


def _run(cli, tmp_path, name, *overrides):
    folder = tmp_path / name
    sets = [a for o in overrides for a in ("--set", o)]
    code, out, err = cli("run", DEFAULT, "--format", "json", "--out", folder, *sets)
    assert code == 0, err
    return folder, json.loads(out)


def test_scenario_and_set_against_two_run_folders(cli, tmp_path):
    folder_a, report_a = _run(cli, tmp_path, "a")
    folder_b, report_b = _run(cli, tmp_path, "b", FASTER)
    from_set = _json(cli, DEFAULT, "--set", FASTER)
    from_folders = _json(cli, folder_a, folder_b)
    # one input changed, written as the scenario document writes it (a quantity with units)
    assert from_set["inputs"] == from_folders["inputs"]
    (changed,) = from_set["inputs"]
    assert changed["path"] == "hardware.tiers.hbf.write_bandwidth"
    assert parse(changed["a"], Kind.BANDWIDTH) == 50e9
    assert parse(changed["b"], Kind.BANDWIDTH) == 100e9
    assert changed["delta"] is None and changed["ratio"] is None
    assert from_set["outputs"] == from_folders["outputs"]
    moved = {r["path"]: r for r in from_set["outputs"]}
    a, b = report_a["step"]["time_s"], report_b["step"]["time_s"]
    assert moved["step.time_s"]["a"] == a and moved["step.time_s"]["b"] == b
    assert moved["step.time_s"]["delta"] == b - a and moved["step.time_s"]["ratio"] == b / a
    assert "links.hbf.busy_s" in moved and "wear.hbf.lifetime_days" in moved
    # the bytes HBF writes do not depend on its speed: unchanged, so not listed
    assert "tiers.hbf.ports.write.bytes_per_step" not in moved
    # the headline figures first (fits, then the step's: time, tokens/s, MFU, ...), in that
    # order; the rest by how far they moved, largest first
    headline = ["fits", "step.time_s", "step.tokens_per_s", "step.mfu", "step.compute_s"]
    headline += ["step.recompute_s", "step.optimizer_s", "step.exposed_transfer_s"]
    headline += ["step.exposed_collective_s", "step.exposed_cpu_s", "step.pipeline_bubble_s"]
    paths = [r["path"] for r in from_set["outputs"]]
    first = [p for p in paths if p in headline]
    assert paths[: len(first)] == first == [p for p in headline if p in first]
    assert paths[0] == "step.time_s"  # fits did not change
    rest = from_set["outputs"][len(first) :]
    sizes = [abs(math.log(r["ratio"])) for r in rest if r["ratio"]]
    assert sizes == sorted(sizes, reverse=True)  # largest change first


def test_table_has_units_and_ratio(faster_table):
    code, out, err = faster_table
    assert code == 0, err
    line = next(x for x in out.splitlines() if x.startswith("hardware.tiers.hbf.write_bandwidth"))
    assert "50 GB/s" in line
    line = next(x for x in out.splitlines() if x.startswith("step.time_s"))
    assert " s " in line and line.rstrip().split()[-1].startswith("x0.")


def test_sides_are_labelled_as_a_shell_takes_them_back(faster_table):
    # the --set value holds a space: unquoted, the label pasted into a shell is two words
    code, out, err = faster_table
    assert code == 0, err
    lines = out.splitlines()
    path = shlex.quote(str(DEFAULT))  # the checkout's own path may need quotes too
    assert f"B = {path} --set 'hardware.tiers.hbf.write_bandwidth=100 GB/s'" in lines


def test_the_table_and_the_readme_say_the_headline_figures_come_first(faster_table):
    # HBF writing at 100 GB/s instead of 50: the step time moves x0.9085, the HBF link's busy
    # time x0.50 (1.622 s -> 813.65 ms); by size alone the link would come first
    code, out, err = faster_table
    assert code == 0, err
    lines = out.splitlines()
    title = next(x for x in lines if " moved, " in x)
    assert title.endswith(
        "moved, the headline figures first (fits, step time, tokens/s, MFU, ...), then the rest "
        "by size, largest first (ratio = B / A):"
    )
    rows = [x.split()[0] for x in lines[lines.index(title) + 3 :]]
    assert rows[:3] == ["step.time_s", "step.tokens_per_s", "step.mfu"]
    assert rows.index("step.exposed_transfer_s") < rows.index("links.hbf.busy_s")
    readme = page("commands")
    section = readme[readme.index("## Comparing: `tiersim compare`") :]
    section = " ".join(section[: section.index("\n## ", 5)].split())
    assert "the headline figures first where they moved, in this order (`fits`, then" in section
    assert "largest change first" not in readme  # what the code did not do


def test_same_scenario_moves_nothing(cli):
    got = _json(cli, SCENARIOS / "seed-1b-adam.yaml", SCENARIOS / "seed-1b-adam.yaml")
    assert got["inputs"] == [] and got["outputs"] == []


def test_bad_sides_exit_2(cli, tmp_path):
    code, _, err = cli("compare", DEFAULT)
    assert code == 2 and "give B, or --set" in err
    (tmp_path / "empty").mkdir()
    code, _, err = cli("compare", DEFAULT, tmp_path / "empty")
    assert code == 2 and "has no scenario.yaml or report.json" in err
    assert "simulating" not in err  # B is checked before A is simulated
    folder = tmp_path / "bad"
    folder.mkdir()
    (folder / "scenario.yaml").write_text(DEFAULT.read_text())
    (folder / "report.json").write_text("{not json")
    code, _, err = cli("compare", DEFAULT, folder)
    assert code == 2 and "report.json: not JSON" in err and "Traceback" not in err


def test_shares_that_would_read_the_same_are_shown_with_the_digits_that_differ():
    from tiersim.report.compare import fmt_delta, fmt_pair, fmt_ratio

    # 99.9991 % and 99.9999 % both read 100.00 % at 2 decimals; at 3: 99.999 and 100.000
    assert fmt_pair("checkpoint.goodput", 0.999991, 0.999999) == ("99.999 %", "100.000 %")
    # 0.0012 % and 0.0013 %: 0.001 and 0.001 at 3 decimals, 0.0012 and 0.0013 at 4
    assert fmt_pair("links.pcie.bandwidth_utilization", 1.2e-5, 1.3e-5) == ("0.0012 %", "0.0013 %")
    # a share that reads differently at 2 decimals keeps them
    assert fmt_pair("checkpoint.goodput", 0.5, 0.25) == ("50.00 %", "25.00 %")
    # 1.149e-5 -> 1.263e-5 (0.001149 % -> 0.001263 %): +0.000114 percentage points
    assert fmt_delta("tiers.dram.ports.read.bandwidth_utilization", 1.14e-6) == "+0.000114 pp"
    assert fmt_delta("checkpoint.goodput", -0.0816) == "-8.16 pp"
    # four significant digits, trailing zeros kept: 1.0996 rounds to 1.100, not to "x1.1"
    assert fmt_ratio(1.0996) == "x1.100" and fmt_ratio(0.99996) == "x0.99996"
    # a ratio within 5e-5 of 1 is shown with the digits that tell it from 1, not as x1
    assert (
        fmt_ratio(1.0000003) == "x1.0000003"
        and fmt_ratio(1.0) == "x1"
        and fmt_ratio(0.5) == "x0.5000"
    )


def test_reports_of_different_versions_are_noted_at_the_top(cli, tmp_path):
    from tiersim import __version__

    folder_a, _ = _run(cli, tmp_path, "a")
    folder_b, _ = _run(cli, tmp_path, "b", FASTER)
    assert _json(cli, folder_a, folder_b)["notes"] == []  # the same version: nothing to say
    # A as an earlier tiersim wrote it: the same report, another version
    report = json.loads((folder_a / "report.json").read_text())
    report["tiersim_version"] = "0.0.1"
    (folder_a / "report.json").write_text(json.dumps(report))
    want = (
        f"A's report was written by tiersim 0.0.1, B's by tiersim {__version__}: outputs may "
        "differ for that reason alone (the version moves when figures do)"
    )
    assert _json(cli, folder_a, folder_b)["notes"] == [want]
    code, out, err = cli("compare", folder_a, folder_b)
    assert code == 0, err
    assert out.splitlines()[0] == f"note: {want}"
    del report["tiersim_version"]  # a report from before reports carried one
    (folder_a / "report.json").write_text(json.dumps(report))
    (note,) = _json(cli, folder_a, folder_b)["notes"]
    assert note.startswith("A's report was written by a tiersim that recorded no version, B's")


def test_fields_an_older_report_lacks_are_listed_apart_not_as_moved():
    from tiersim.report.compare import compare, compare_tables

    # as 0.6.0 wrote a link (no in_flight_s) against 0.7.0's, where the link also carried a
    # direction more
    old = {"tiersim_version": "0.6.0", "links": {"hbf": {"busy_s": 2.0}}}
    old["links"]["hbf"]["bytes_by_direction"] = {"hbm->hbf": 10}
    new = {"tiersim_version": "0.7.0", "links": {"hbf": {"busy_s": 2.0, "in_flight_s": 1.625}}}
    new["links"]["hbf"]["bytes_by_direction"] = {"hbm->hbf": 10, "hbf->hbm": 20}
    got = compare({}, {}, old, new)
    # no link of A's report has an in_flight_s: a field its tiersim did not write
    assert got["only_in_b"] == [{"path": "links.hbf.in_flight_s", "value": 1.625}]
    assert got["only_in_a"] == []
    # A's report has bytes_by_direction: a direction its link did not carry moved (- -> 20)
    (moved,) = got["outputs"]
    assert (moved["path"], moved["a"], moved["b"]) == (
        "links.hbf.bytes_by_direction.hbf->hbm",
        None,
        20,
    )
    table = compare_tables(got, "old", "new").splitlines()
    assert "1 output moved, " in "\n".join(table)
    title = next(ln for ln in table if "only in B" in ln)
    assert title == (
        "1 output only in B: field A's report (another tiersim version) does not have, "
        "not counted as moved:"
    )
    assert table[-1].split() == ["links.hbf.in_flight_s", "1.625", "s"]
    # the other way round: only in A
    assert compare({}, {}, new, old)["only_in_a"] == got["only_in_b"]
    # one version writes the same fields: a leaf one side lacks is an output that moved
    same = compare({}, {}, {**old, "tiersim_version": "0.7.0"}, new)
    assert same["only_in_b"] == []
    assert "links.hbf.in_flight_s" in [r["path"] for r in same["outputs"]]


def test_wear_margins_lifetimes_and_small_ratios_read_in_one_format():
    from tiersim.report.compare import fmt_delta, fmt_pair, fmt_ratio

    # margins 0.008403x -> 0.007642x: B - A = -0.000761, a difference of ratios, no 'x'
    assert fmt_delta("wear.hbf.margin", 0.007642 - 0.008403) == "-0.000761"
    assert fmt_delta("wear.hbf.margin", 2.5 - 1.25) == "+1.25"
    # 553.1 and 503 years, in days (365 a year): 201,881.5 and 183,595 days; one format for
    # both, the decimals of 4 significant digits: '503.0 years', not '503 years'
    a, b = 553.1 * 365, 503.0 * 365
    assert fmt_pair("wear.nvme.lifetime_days", a, b) == ("553.1 years", "503.0 years")
    # 15.33 and 9.5 days: two decimals for both (the larger's 4 significant digits)
    assert fmt_pair("wear.hbf.lifetime_days", 15.33, 9.5) == ("15.33 days", "9.50 days")
    # 100.00001 and 100.00004 years read the same to 1 decimal: decimals until they differ
    pair = fmt_pair("wear.nvme.lifetime_days", 100.00001 * 365, 100.00004 * 365)
    assert pair == ("100.00001 years", "100.00004 years")
    # days against years (126 days, 5 years): as fmt_days gives each
    assert fmt_pair("wear.hbf.lifetime_days", 126.0, 1825.0) == ("126 days", "5 years")
    # the review's mixtral ratio: 1.00018357 is x1.000 to 4 digits; 5 tell it from 1
    assert fmt_ratio(1.00018357) == "x1.0002"
    assert fmt_ratio(0.999999997) == "x0.999999997"  # 9 digits: 0.99999999 at 8 is not it
