"""A second new user's pass over what was merged on 2026-12-06 (docs/review-2026-12-06-e.md,
"Second pass (rev2)"): each test fails without its fix."""

from __future__ import annotations

import pytest


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
    # `compared`: where (g)'s shortcuts applied, none in a refused case
    assert summary == {"counts": {"ok": 0, "refused": 1}, "compared": {}, "violations": {}}


def test_the_deep_stage_refusal_gives_the_shipped_depth_its_unit(cli):
    """ "...; the deepest model shipped has 128. Give fewer layers": 128 of what (layers:
    megatron-1t's model.layers, state/timeline_size.py's docstring)."""
    code, _, err = cli("inventory", "scenarios/default.yaml", "--set", "model.layers=20000")
    assert code == 3, err
    assert "the deepest model shipped has 128 layers. Give fewer layers" in err


@pytest.mark.parametrize(
    ("framework", "said"), [(None, "(no training.framework given)"), ("fsdp", "(got 'fsdp')")]
)
def test_the_deepspeed_section_s_note_names_the_framework_as_other_notes_do(cli, framework, said):
    """`training.deepspeed` set on default.yaml (no framework) was noted "read only under
    training.framework: deepspeed (got not set)"; distributed_optimizer's note says "no
    training.framework given", and quotes a framework given."""
    extra = ["--set", f"training.framework={framework}"] if framework else []
    args = ["--set", "training.deepspeed.version=0.3.0", *extra]
    code, _, err = cli("validate", "scenarios/default.yaml", *args)
    assert code == 0, err
    assert f"read only under training.framework: deepspeed {said}" in err


@pytest.mark.parametrize("key", ["stage3_prefetch_bucket_size", "stage3_max_live_parameters"])
def test_import_takes_deepspeed_s_zero_for_the_prefetch_window(cli, tmp_path, key):
    """DeepSpeed's zero/config.py takes each stage3_* size `ge=0` (a prefetch bucket of 0:
    no prefetch, docs/zero3-prefetch.md), and so does `training.deepspeed.<key>`; `import`
    of `{"zero_optimization": {"stage": 3, "<key>": 0}}` was refused "is 0 (expected a
    whole number >= 1)", the bound of training.offload's older name it wrote the value to."""
    import yaml

    config = tmp_path / "ds.json"
    config.write_text(
        f'{{"train_micro_batch_size_per_gpu": 1, "zero_optimization": {{"stage": 3, "{key}": 0}}}}'
    )
    out = tmp_path / "s.yaml"
    hf = "tests/fixtures/llama-2-7b.config.json"
    code, _, err = cli("import", config, "--hf-config", hf, "--out", out)
    assert code == 0, err
    training = yaml.safe_load(out.read_text())["training"]
    assert training["deepspeed"] == {key: 0}
    code, _, err = cli("validate", out)
    assert code == 0, err
