"""Reliability, second round (issue 35): each fault an independent adversarial suite found,
handled (exit 2 or 3 with one line, exit 70 for our own bug, or the right result)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from bounded import within
from conftest import ROOT, SCENARIOS
from test_sweep_spec import TINY, write_sweep

import tiersim.runner as runner_module
from tiersim.report.invariants import report_violations
from tiersim.sweep.store import LOG_NAME, read_log
from tiersim.sweep.worker import ERROR, PointTask, run_point

TWO = {"grid": {"training.grad_accumulation": [1, 2]}}  # two small points, both run
LINE_A = b'{"key":"a","status":"ok","error":null,"outputs":{}}\n'  # a point's line, as logged
LINE_B = LINE_A.replace(b'"a"', b'"b"')
GiB = 2**30


def _python(code: str, env: dict[str, str] | None = None, cwd: Path = ROOT, timeout: float = 60):
    """Run `code` in a fresh interpreter (tiersim from this checkout): (exit code, stdout,
    stderr)."""
    environ = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=environ,
        cwd=cwd,
        timeout=timeout,
    )
    return done.returncode, done.stdout, done.stderr


def _limited(code: str, limit_bytes: int) -> str:
    """`code` run with its address space limited (as `ulimit -v` and batch schedulers do)."""
    return (
        "import resource\n"
        f"resource.setrlimit(resource.RLIMIT_AS, ({limit_bytes}, {limit_bytes}))\n"
        + textwrap.dedent(code)
    )


# --- a sweep's log read under a batch scheduler's memory limit --------------------------------


def test_a_sweeps_log_is_read_under_a_1_5_gib_address_space_limit(tmp_path):
    log = tmp_path / LOG_NAME
    log.write_bytes(LINE_A + LINE_B)
    code = f"""
        from pathlib import Path
        from tiersim.sweep.store import read_log
        entries, skipped, intact = read_log(Path({str(log)!r}))
        print(sorted(entries), skipped, intact)
    """
    rc, out, err = _python(_limited(code, 3 * GiB // 2))
    assert (rc, err) == (0, "")
    assert out.split() == ["['a',", "'b']", "0", str(2 * len(LINE_A))]  # both lines intact


def test_a_second_sweep_into_a_folder_with_a_log_is_refused_under_a_memory_limit(tmp_path):
    path = write_sweep(tmp_path, TWO)
    out = tmp_path / "out"
    out.mkdir()
    (out / LOG_NAME).write_bytes(LINE_A)
    code = f"""
        import sys
        from tiersim.cli import main
        sys.exit(main(["sweep", {str(path)!r}, "--out", {str(out)!r}, "--no-plots"]))
    """
    rc, _, err = _python(_limited(code, 2 * GiB))
    assert rc == 2, err
    assert "already holds 1 finished points; pass --resume" in err
    assert "MemoryError" not in err and "Traceback" not in err


def test_a_whole_resume_runs_under_a_2_gib_address_space_limit(cli, tmp_path):
    """`sweep --resume` (its workers, its tables) where a batch scheduler limits the address
    space: it reserved 4 GiB for the log at once and died with MemoryError under 4.1 GiB."""
    path = write_sweep(tmp_path, TWO)
    out = tmp_path / "out"
    code, _, err = cli("sweep", path, "--out", out, "--workers", "1", "--no-plots")
    assert code == 0, err
    (out / "results.csv").unlink()  # rebuilt by the resume
    code = f"""
        import sys
        from tiersim.cli import main
        sys.exit(main(["sweep", {str(path)!r}, "--out", {str(out)!r}, "--resume",
                       "--workers", "1", "--no-plots"]))
    """
    rc, stdout, err = _python(_limited(code, 2 * GiB))
    assert rc == 0, err
    assert "resumed: 2 points reused" in stdout and (out / "results.csv").is_file()


# --- a log line nested 100,000 deep ------------------------------------------------------------


def test_a_log_line_nested_100000_deep_is_a_corrupt_line_not_a_recursion_error(tmp_path):
    log = tmp_path / LOG_NAME
    deep = b"[" * 100_000 + b"]" * 100_000
    log.write_bytes(LINE_A + deep + b"\n")
    entries, skipped, intact = read_log(log)
    assert list(entries) == ["a"]
    assert skipped == 1  # the deep line, counted as unreadable
    assert intact == len(LINE_A) + 200_001  # both lines whole (each ends with its newline)


def test_resume_over_a_deep_log_line_says_so_and_runs_on(cli, tmp_path):
    path = write_sweep(tmp_path, TWO)
    out = tmp_path / "out"
    code, _, err = cli("sweep", path, "--out", out, "--workers", "1", "--no-plots")
    assert code == 0, err
    with open(out / LOG_NAME, "ab") as log:
        log.write(b'{"a":' * 100_000 + b"1" + b"}" * 100_000 + b"\n")
    with within():
        code, stdout, err = cli("sweep", path, "--out", out, "--resume", "--no-plots")
    assert code == 0, err
    assert "Traceback" not in err
    assert "1 unreadable line(s)" in err and "corrupt" in err
    assert "resumed: 2 points reused" in stdout


# --- per-point reports deleted from a sweep's folder ------------------------------------------


def test_resume_reruns_points_whose_reports_were_deleted(cli, tmp_path):
    path = write_sweep(tmp_path, TWO)
    out = tmp_path / "out"
    code, _, err = cli("sweep", path, "--out", out, "--workers", "1", "--no-plots")
    assert code == 0, err
    reports = sorted((out / "points").glob("*.json"))
    assert len(reports) == 2
    kept = reports[1].read_bytes()
    reports[0].unlink()
    code, stdout, err = cli("sweep", path, "--out", out, "--resume", "--no-plots")
    assert code == 0, err
    assert reports[0].is_file(), "the deleted report is written again"
    assert reports[1].read_bytes() == kept
    assert "1 report(s) missing from" in err and "run again" in err
    assert "resumed: 1 points reused" in stdout
    lines = (out / LOG_NAME).read_bytes().splitlines()
    assert len(lines) == 2  # one line per point: the rerun one's old line was dropped


# --- --out with control characters, and a non-ASCII --out on an ASCII terminal ----------------


def test_control_characters_in_out_are_escaped_in_the_results_line(cli, tmp_path):
    out = tmp_path / "a\x1b[31mred\x07"
    code, stdout, err = cli("run", SCENARIOS / "default.yaml", "--out", out)
    assert code == 0, err
    line = next(x for x in stdout.splitlines() if x.startswith("results: "))
    assert "\x1b" not in line and "\x07" not in line
    assert "a\\x1b[31mred\\x07" in line
    assert (out / "report.json").is_file()


def test_control_characters_in_a_sweeps_out_are_escaped_in_its_lines(cli, tmp_path):
    path = write_sweep(tmp_path, TWO)
    out = tmp_path / "s\x1b]0;title\x07"
    code, stdout, err = cli("sweep", path, "--out", out, "--workers", "1", "--no-plots")
    assert code == 0, err
    assert "\x1b" not in stdout + err and "\x07" not in stdout + err
    assert "s\\x1b]0;title\\x07" in stdout


def test_a_non_ascii_out_under_an_ascii_terminal_is_escaped_not_a_traceback(tmp_path):
    out = tmp_path / "r\u00e9sultats-\u65e5\u672c"
    code = f"""
        import sys
        from tiersim.cli import main
        sys.exit(main(["run", "scenarios/default.yaml", "--out", {str(out)!r}]))
    """
    rc, stdout, err = _python(code, {"PYTHONIOENCODING": "ascii", "LC_ALL": "C"})
    assert rc == 0, err
    assert "Traceback" not in err
    assert "r\\xe9sultats-\\u65e5\\u672c" in stdout
    assert (out / "report.json").is_file()


# --- one rulebook: what validate refuses, run refuses too --------------------------------------


def _with_plan(tmp_path: Path, plan: str) -> Path:
    path = tmp_path / "planned.yaml"
    path.write_text((SCENARIOS / "default.yaml").read_text() + "\nplan:\n" + plan)
    return path


def test_run_refuses_a_plan_section_that_validate_refuses(cli, tmp_path):
    path = _with_plan(tmp_path, "  placement.optimizer: [hbm, hbm]\n")
    code, _, err = cli("validate", path)
    assert code == 2
    code, _, run_err = cli("run", path, "--out", tmp_path / "out")
    assert code == 2
    assert "plan.placement.optimizer: lists 'hbm' twice" in run_err
    assert not (tmp_path / "out").exists(), "nothing written"
    assert run_err.splitlines()[0] == err.splitlines()[0]


def test_run_set_into_a_plan_section_cannot_write_a_file_validate_refuses(cli, tmp_path):
    path = _with_plan(tmp_path, "  placement.optimizer: [hbm, dram]\n")
    assert cli("validate", path)[0] == 0
    out = tmp_path / "out"
    code, _, err = cli("run", path, "--out", out, "--set", "plan.placement.optimizer[0]=hbm")
    assert code == 2, err
    assert "plan.placement" in err and "(from --set" in err
    assert not (out / "scenario.yaml").exists()


def test_a_sweep_whose_base_has_a_refused_plan_section_runs_no_point(cli, tmp_path):
    base = {**TINY, "plan": {"placement.optimizer": ["hbm", "hbm"]}}
    path = write_sweep(tmp_path, TWO, base)
    code, _, err = cli("sweep", path, "--out", tmp_path / "out", "--workers", "1", "--no-plots")
    assert code == 2
    assert "every point is invalid" in err and "lists 'hbm' twice" in err


# --- the report invariant check: our bug, said loudly, never written ---------------------------


def _breaking(monkeypatch, change):
    """Make every report break an invariant by `change(report)`."""
    real = runner_module.run_report

    def broken(*args, **kwargs):
        report = real(*args, **kwargs)
        change(report)
        return report

    monkeypatch.setattr(runner_module, "run_report", broken)


def _port_over_one(report):
    report["tiers"]["hbm"]["ports"]["read"]["bandwidth_utilization"] = 1.5


def _nan_step(report):
    report["step"]["time_s"] = float("nan")


def _lost_bytes(report):
    report["inventory"]["per_gpu"]["total"] += 1000


@pytest.mark.parametrize("change", [_port_over_one, _nan_step, _lost_bytes])
def test_a_report_that_breaks_an_invariant_is_exit_70_and_not_written(
    cli, tmp_path, monkeypatch, change
):
    _breaking(monkeypatch, change)
    out = tmp_path / "out"
    code, stdout, err = cli("run", SCENARIOS / "default.yaml", "--out", out)
    assert code == 70
    assert "please report" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    assert not (out / "report.json").exists() and stdout == ""


def test_a_sweep_point_that_breaks_an_invariant_is_an_error_saying_please_report(
    tmp_path, monkeypatch
):
    _breaking(monkeypatch, _port_over_one)
    task = PointTask(TINY, str(tmp_path), "s.yaml point 0", False, {}, 0)
    result = run_point(task)
    assert result.status == ERROR and result.report_json is None
    assert "please report" in result.error and "tiers.hbm.ports.read" in result.error


def test_a_sweep_with_a_point_that_breaks_an_invariant_exits_70_keeping_the_rest(
    cli, tmp_path, monkeypatch
):
    """A one-point sweep runs its point in this process (the point it times), so the patch
    applies: the point is an error saying please report, no report is written for it, the
    tables are, and the sweep exits 70."""
    _breaking(monkeypatch, _port_over_one)
    path = write_sweep(tmp_path, {"grid": {"training.grad_accumulation": [2]}})
    out = tmp_path / "out"
    code, _, err = cli("sweep", path, "--out", out, "--workers", "1", "--no-plots")
    assert code == 70
    assert "1 point(s) gave a report that breaks its invariants" in err and "please report" in err
    assert "Traceback" not in err
    assert list((out / "points").glob("*.json")) == []
    assert "please report" in (out / "results.csv").read_text()


def test_the_checkpoint_drain_fault_never_reports_a_port_over_its_bandwidth(every_step_drain_run):
    """The README's own example of a drain outlasting the step (Llama 2 7B, NVMe writing
    1 GB/s, one micro-batch, a checkpoint every step) reported the NVMe write port at 564 %
    of its bandwidth: now either the figures are sound or the run refuses them as a bug.
    `tiersim run scenarios/default.yaml --format json --out OUT --set ...` in this process
    (conftest's EVERY_STEP_DRAIN: the three settings above), shared with
    test_doc_shipped_figures."""
    code, stdout, err, out = every_step_drain_run
    if code == 70:  # refused as a bug until the drain is in every per-step rate
        assert "please report" in err and not (out / "report.json").exists()
    else:
        assert code == 0, err
        assert report_violations(json.loads(stdout)) == []


def test_every_golden_report_satisfies_the_invariants():
    for path in sorted((ROOT / "tests" / "golden" / "reports").glob("*.json")):
        assert report_violations(json.loads(path.read_text())) == [], path.name


def test_the_invariants_name_each_violation_by_its_key_path():
    report = {
        "scenario": "x",
        "step": {"time_s": -1.0, "overlap": float("inf")},
        "links": {"pcie": {"bytes": 10, "bytes_by_direction": {"a->b": 4, "b->a": 5}}},
        "tiers": {
            "hbm": {
                "bytes_read_per_step": 7,
                "read_by_class": {"weights": 3, "gradients": 4},  # 3 + 4 = 7: conserved
                "bytes_written_per_step": 9,
                "written_by_class": {"weights": 8},  # 8 != 9
                "ports": {"write": {"bytes_per_step": 9, "bandwidth_utilization": 1.0}},
                "classes": {"weights": 5},
                "checkpoint_bytes": 2,
                "resident_bytes": 7,  # 5 + 2: conserved
            }
        },
        "inventory": {"per_gpu": {"weights": 2, "optimizer": 6, "total": 8}},
    }
    found = report_violations(report)
    assert [v.split(":")[0] for v in found] == [
        "step.time_s",
        "step.overlap",
        "tiers.hbm.bytes_written_per_step",
        "links.pcie.bytes",  # 4 + 5 = 9, not 10
    ]


# --- newcomer traps ---------------------------------------------------------------------------


def test_a_copied_default_scenario_does_not_overwrite_the_demos_results(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    demo = tmp_path / "scenarios" / "default.yaml"
    demo.parent.mkdir()
    shutil.copy(SCENARIOS / "default.yaml", demo)
    code, _, err = cli("run", demo)
    assert code == 0, err
    report = (tmp_path / "results" / "default" / "report.json").read_bytes()
    mine = tmp_path / "my-plan.yaml"
    mine.write_text(demo.read_text().replace("grad_accumulation: 16", "grad_accumulation: 8"))
    code, _, err = cli("run", mine)
    assert code == 2
    assert "results/default" in err and "name:" in err and "--out" in err
    assert len(err.strip().splitlines()) == 1
    assert (tmp_path / "results" / "default" / "report.json").read_bytes() == report
    # its own folder, or the demo's own file again, run as before
    assert cli("run", mine, "--out", "results/mine")[0] == 0
    assert cli("run", demo)[0] == 0
    assert cli("run", "results/default/scenario.yaml")[0] == 0


def test_the_sweeps_estimate_counts_its_plots(cli, tmp_path):
    path = write_sweep(tmp_path, {"grid": {"training.grad_accumulation": [1, 2, 4]}})
    code, _, err = cli("sweep", path, "--out", tmp_path / "out", "--workers", "1")
    assert code == 0, err
    line = next(x for x in err.splitlines() if x.startswith("point "))
    # a bound, said as one: the outputs that hold still across the points are not drawn
    (count,) = re.findall(r"then at most (\d+) plots \(one per output that changes", line)
    drawn = list((tmp_path / "out" / "plots").glob("*.png"))
    assert 0 < len(drawn) <= int(count), (line, drawn)
    assert "at most about" in line and "up to" not in line, line
    code, _, err = cli("sweep", path, "--out", tmp_path / "none", "--workers", "1", "--no-plots")
    line = next(x for x in err.splitlines() if x.startswith("point "))
    assert "plots" not in line, line


def test_plots_that_cannot_be_drawn_for_memory_leave_the_results_and_say_so(
    cli, tmp_path, monkeypatch
):
    """Under a 1.5 GiB `ulimit -v`, matplotlib's import in the sweep process failed now and
    then ("failed to map segment from shared object", an ImportError) after every point had
    run: a traceback and exit 1. The results stand; the plots are said not drawn."""
    import tiersim.sweep.run as run_module

    def no_memory(*args, **kwargs):
        raise ImportError("pyexpat.so: failed to map segment from shared object")

    monkeypatch.setattr(run_module, "plot_sweep", no_memory)
    path = write_sweep(tmp_path, TWO)
    out = tmp_path / "out"
    code, stdout, err = cli("sweep", path, "--out", out, "--workers", "1")
    assert code == 0, err
    assert "plots not drawn (ImportError: pyexpat.so: failed to map segment" in stdout
    assert (out / "results.csv").is_file() and not (out / "plots").exists()
