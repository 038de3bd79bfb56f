"""A second new user's pass over what was merged on 2026-12-06 (docs/review-2026-12-06-e.md,
"Second pass (rev2)"): each test fails without its fix."""

from __future__ import annotations


def test_run_refuses_a_stage_too_deep_for_its_timeline_before_simulating(cli, monkeypatch):
    """`tiersim run scenarios/default.yaml --set model.layers=20000` simulated the whole step
    (24 s; zero-infinity-1t-dgx2.yaml 41 s) and only then refused it (exit 3) when the report
    built its memory timeline: `inventory` refuses the same scenario at once. 20,000 layers x
    1 stage is 2 x the 10,000 a timeline follows (state/timeline_size.py)."""
    import tiersim.runner

    def simulated(*_args, **_kwargs):
        raise AssertionError("simulated a step whose report is refused")

    monkeypatch.setattr(tiersim.runner, "simulate_resolved", simulated)
    code, _, err = cli("run", "scenarios/default.yaml", "--set", "model.layers=20000")
    assert code == 3, err
    assert "memory timeline would follow 20,000 layers of one pipeline stage" in err


def test_explore_invariants_counts_no_refusal_as_a_violation(monkeypatch, capsys):
    """`benchmarks/explore_invariants.py --cases 1 --seed 4 --refusals`: case 0 (interleaving
    with 1 micro-batch over 2 stages) is refused, exit 2, which invariant f allows
    (docs/invariants.md); its summary said `"violations": {"r": 1}`, a violation."""
    import json
    import runpy
    import sys

    argv = ["explore_invariants.py", "--cases", "1", "--seed", "4", "--refusals"]
    monkeypatch.setattr(sys, "argv", argv)
    runpy.run_path("benchmarks/explore_invariants.py", run_name="__main__")
    out = capsys.readouterr().out
    assert out.startswith("case 0: r ")  # the refusal is printed
    summary = json.loads(out.splitlines()[-1])
    assert summary == {"counts": {"ok": 0, "refused": 1}, "violations": {}}
