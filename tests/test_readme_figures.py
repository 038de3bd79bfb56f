"""The docs' examples still work and the figures they quote for the default scenario are what
tiersim prints now: the scenario file examples (README and docs/scenarios.md), the first
session, the compare example (HBF writing at 100 GB/s instead of 50) and the tier ports'
paragraph."""

from __future__ import annotations

import json
import shlex
import subprocess

import pytest
from docs_text import ROOT, every_page, page

TEXT = every_page()
README = " ".join(TEXT.split())  # lines rewrapped: one space
DEFAULT = ROOT / "scenarios" / "default.yaml"


def _moved(compare: dict, path: str) -> dict:
    (row,) = [r for r in compare["outputs"] if r["path"] == path]
    return row


def test_compare_example_figures(cli):
    code, out, err = cli(
        "compare",
        DEFAULT,
        "--set",
        "hardware.tiers.hbf.write_bandwidth=100 GB/s",
        "--format",
        "json",
    )
    assert code == 0, err
    compare = json.loads(out)
    step = _moved(compare, "step.time_s")
    exposed = _moved(compare, "step.exposed_transfer_s")
    port = _moved(compare, "tiers.hbf.ports.write.bandwidth_utilization")
    quoted = (
        f"step {step['a']:.3f} s -> {step['b']:.3f} s (x{step['ratio']:.4f}), exposed transfer "
        f"x{exposed['ratio']:.4f}, the HBF write port's share of its bandwidth "
        f"{100 * port['a']:.1f} % -> {100 * port['b']:.1f} %"
    )
    assert quoted in README


def test_tier_ports_paragraph_figures(cli, tmp_path):
    code, out, err = cli("run", DEFAULT, "--format", "json", "--out", tmp_path)
    assert code == 0, err
    report = json.loads(out)
    write = report["tiers"]["hbf"]["ports"]["write"]
    link = report["links"]["hbf"]
    quoted = (
        f"the HBF write port carries {write['bytes_per_step'] / 1e9:.2f} GB per step at "
        f"{write['bandwidth'] / 1e9:.0f} GB/s, {write['full_rate_s']:.3f} s, "
        f"{100 * write['bandwidth_utilization']:.1f} % of its bandwidth over the "
        f"{report['step']['time_s']:.3f} s step, while the "
        f"{link['bandwidth_per_direction'] / 1e12:.1f} TB/s HBF link under it is busy "
        f"{100 * link['utilization']:.1f} % of the step at "
        f"{100 * max(link['bandwidth_utilization_by_direction'].values()):.1f} % of its bandwidth"
    )
    assert quoted in README


def test_busy_and_in_flight_paragraph_figures(cli, tmp_path):
    path = ROOT / "scenarios" / "gpt3-175b-tp-pp.yaml"
    code, out, err = cli("run", path, "--format", "json", "--out", tmp_path)
    assert code == 0, err
    report = json.loads(out)
    nvlink = report["links"]["nvlink"]
    quoted = (
        f"NVLink busy {100 * nvlink['utilization']:.1f} % of the "
        f"{report['step']['time_s']:.3f} s step, and in flight "
        f"{100 * nvlink['in_flight_utilization']:.1f} % of it"
    )
    assert quoted in README


@pytest.mark.parametrize("where", ["README", "scenarios"])
def test_scenario_file_example_is_valid(cli, tmp_path, where):
    # the first YAML block of the page, as a newcomer would copy it
    block = page(where).split("```yaml\n", 1)[1].split("```", 1)[0]
    assert block.startswith("name: my-run")
    path = tmp_path / "my-run.yaml"
    path.write_text(block)
    code, out, err = cli("validate", path)
    assert (code, err) == (0, ""), err
    assert out == f"{path}: valid scenario 'my-run'\n"


def test_first_session_runs_as_written(cli, tmp_path, monkeypatch):
    # "A first session": each line as written, in a folder holding the shipped default
    block = page("README").split("A first session:", 1)[1].split("```\n", 1)[1].split("```", 1)[0]
    (tmp_path / "scenarios").mkdir()
    (tmp_path / "scenarios" / "default.yaml").write_text((DEFAULT).read_text())
    monkeypatch.chdir(tmp_path)
    lines = [ln.split(" # ")[0].strip() for ln in block.splitlines() if ln.strip()]
    for line in lines:
        if not line.startswith(".venv/bin/tiersim "):
            subprocess.run(["bash", "-c", line], check=True)
            continue
        args = shlex.split(line)[1:]
        args += ["--workers", "1"] if args[0] == "plan" else []
        code, out, err = cli(*args)
        assert code == 0, f"{line}: {err}"
        assert out, line
    assert (tmp_path / "results" / "default" / "step.png").exists()
    # the plan's own advice, its best plan's rerun line, runs beside the session's results
    rerun = next(ln for ln in out.splitlines() if ln.strip().startswith("rerun:"))
    code, _, err = cli(*shlex.split(rerun.split("rerun:", 1)[1])[1:])
    assert code == 0, f"{rerun}: {err}"
