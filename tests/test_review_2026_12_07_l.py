"""Review 2026-12-07 (l): a new user's pass over what landed in 0.23.0 (`import` of an
Accelerate FSDP config, `measure --scenario`, `plan` under megatron, the expert-overlap
refusals, the `auto` checkpoint interval's words; docs/review-2026-12-07-l.md). Each test fails
on the tree before its fix; expected values are worked by hand in each."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from test_measure import GPT2_TINY  # GPT-2 style, 2 layers of width 64, 4 heads

from tiersim.cli import main

ROOT = Path(__file__).resolve().parent.parent


def _measure(argv: list[str], capsys) -> dict:
    assert main([*argv, "--device", "cpu", "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_measure_runs_a_scenario_with_eager_attention_on_tiersims_modules(tmp_path, capsys):
    """`measure --scenario scenarios/default.yaml` (the shipped demo: `implementation:
    megatron`, `attention_kernel: eager`) ended in a traceback, "ValueError: attention(='eager')
    must be one of ('sdpa', 'math')": tiersim's own modules called their explicit softmax
    `math` only, though --help says "eager (or math)"."""
    pytest.importorskip("torch", reason="tiersim measure needs PyTorch (the `measure` extra)")
    precision = {"weights": "bf16", "gradients": "bf16", "master": "none", "optimizer": "bf16"}
    raw = {
        "name": "m",
        "model": GPT2_TINY,
        "training": {
            "implementation": "megatron",
            "attention_kernel": "eager",
            "seq_len": 16,
            "precision": precision,
        },
    }
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(raw))
    got = _measure(["measure", "--scenario", str(path)], capsys)
    assert got["configuration"]["implementation"] == "tiersim"
    # parameters by hand: embeddings 128 x 64 + positions 32 x 64 = 10,240; a layer's two
    # LayerNorms 2 x 128, QKV 64 x 192 + 192, out 64 x 64 + 64, MLP 64 x 256 + 256 + 256 x 64
    # + 64: 256 + 12,480 + 4,160 + 33,088 = 49,984, x 2 layers = 99,968; final LayerNorm 128:
    # 110,336 parameters, 2 bytes each in bf16
    assert got["classes"]["weights"]["measured_bytes"] == 2 * 110_336
    # eager is math's explicit softmax: the same saved activations as --attention math
    math = _measure(["measure", "--scenario", str(path), "--attention", "math"], capsys)
    assert got["activations"]["per_layer_bytes"] == math["activations"]["per_layer_bytes"]


def test_the_expert_overlaps_precision_refusal_names_the_key_that_set_it():
    """Under `framework: megatron` with `parallel.overlap_expert_comm`, an fp32 compute was
    refused at `training.precision`, a section of five keys, whichever of them set it."""
    from engine_helpers import merge
    from test_expert_overlap_checks import ACCEPTED, _problems

    for precision, key in (
        ({"compute": "fp32"}, "training.precision.compute"),
        # no compute key: the compute precision is the weights' (fp32 here)
        ({"weights": "fp32"}, "training.precision.weights"),
    ):
        got = _problems(merge(ACCEPTED, {"training": {"precision": precision}}))
        assert [(path, code) for path, code, _ in got] == [(key, "E-CONFLICT")]
        assert "'only supported with bf16 or fp16 model'" in got[0][2]


def _import_accelerate(cfg: dict, hf_fixture: str, tmp_path) -> tuple[Path, Path]:
    """`tiersim import` of an Accelerate config `cfg` with a model fixture: (config, scenario)."""
    path, out = tmp_path / "acc.yaml", tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(cfg))
    hf = ROOT / "tests" / "fixtures" / hf_fixture
    assert main(["import", str(path), "--hf-config", str(hf), "--out", str(out)]) == 0
    return path, out


def test_an_accelerate_configs_reduce_dtype_note_speaks_of_accelerate(tmp_path, capsys):
    """`import` of an Accelerate FSDP config with `mixed_precision: bf16` noted "gradients
    reduced in bf16 (training.precision.gradients, as torchtitan's mixed_precision_reduce is
    read)": a key of another framework's file, which the user never wrote."""
    cfg = {"distributed_type": "FSDP", "mixed_precision": "bf16", "num_processes": 8}
    path, _ = _import_accelerate(cfg, "llama-3-8b.config.json", tmp_path)
    err = capsys.readouterr().err
    said = [line for line in err.splitlines() if ": mixed_precision: " in line]
    assert said == [
        f"note: {path}: mixed_precision: bf16: gradients reduced in bf16 "
        "(training.precision.gradients: the plugin's set_mixed_precision makes the reduce "
        "dtype the mixed precision's); FSDP keeps each reduced shard in the parameters' fp32 "
        "(foreach_reduce casts it back), counted so: 4 bytes a value [W-IMPORT-ASSUMED]"
    ]
    assert "torchtitan" not in err


@pytest.mark.parametrize(
    "cfg, said",
    [
        # ZeRO stage 2 without offload_optimizer
        (
            {"fp16": {"enabled": True, "fp16_master_weights_and_grads": True},
             "zero_optimization": {"stage": 2}},
            "fp16.fp16_master_weights_and_grads: true without zero_optimization."
            "offload_optimizer (DeepSpeed asserts 'Master weights feature requires ZeRO-2 "
            "Offload with DeepSpeedCPUAdam'; expected zero_optimization.offload_optimizer "
            "(device cpu or nvme) beside it, or false)",
        ),
        # no zero_optimization section: stage 0
        (
            {"fp16": {"enabled": True, "fp16_master_weights_and_grads": True}},
            "fp16.fp16_master_weights_and_grads: true at ZeRO stage 0 (DeepSpeed asserts it "
            "'is only supported with ZeRO Stage 1, 2, or 3'; expected zero_optimization.stage "
            "1, 2 or 3, or false)",
        ),
        # bf16 optimizer states without the bf16 master
        (
            {"bf16": {"enabled": True, "bf16_optimizer_states": True},
             "zero_optimization": {"stage": 2}},
            "bf16.bf16_optimizer_states: true (DeepSpeed asserts it 'requires "
            "bf16_master_weights_and_grads to be enabled'; expected "
            "bf16.bf16_master_weights_and_grads: true beside it, or false)",
        ),
    ],
)  # fmt: skip
def test_deepspeeds_low_precision_master_refusals_say_what_to_write(tmp_path, capsys, cfg, said):
    """DeepSpeed's fp16/bf16 master refused where DeepSpeed asserts: exit 2 quoting the
    assertion, with no "expected" (what the user may write instead) as every other refusal
    has."""
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, **cfg}))
    hf = ROOT / "tests" / "fixtures" / "gpt2.config.json"
    assert main(["import", str(path), "--hf-config", str(hf)]) == 2
    err = capsys.readouterr().err
    assert f"{path}: {said} [E-IMPORT-VALUE]" in err


def test_plans_help_says_what_the_default_space_leaves_out_and_the_spare_line(capsys):
    """`plan --help` listed the default space's keys as if every scenario searched them all,
    though under `training.framework: megatron` the homes and the optimizer's site are left
    out (the header's `left out:`), and said nothing of each plan's `spare:` line and its
    THIN mark (1.61 GB: 16 x 2 x 6 MiB x 8 = 1,610,612,736 B)."""
    with pytest.raises(SystemExit) as done:
        main(["plan", "--help"])
    assert done.value.code == 0
    text = " ".join(capsys.readouterr().out.split())  # argparse's wrapping undone
    assert (
        "less what the scenario refuses for every candidate, named after `left out:` in the "
        "header: under training.framework: megatron every class's home and the optimizer's "
        "site)" in text
    )
    assert (
        "the GPU memory each has to spare at its simulated peak (`spare:`, marked THIN under "
        "1.61 GB, memory the model does not count)" in text
    )


def test_an_accelerate_ddp_configs_gradients_stay_fp32_under_autocast(tmp_path, capsys):
    """`distributed_type: MULTI_GPU` (DDP) with `mixed_precision: bf16` was imported with bf16
    gradients, as FSDP's mixed-precision policy reduces them; DDP has no such policy:
    Accelerate wraps the forward in autocast (accelerator.py `native_amp`), the parameters stay
    fp32 and so do their gradients and the all-reduce."""
    cfg = {"distributed_type": "MULTI_GPU", "mixed_precision": "bf16", "num_processes": 8}
    _, out = _import_accelerate(cfg, "gpt2.config.json", tmp_path)
    assert "autocast around the forward" in capsys.readouterr().err
    from tiersim import api
    from tiersim.state.inventory import build_inventory
    from tiersim.state.resolved import resolve

    s = api.load(out).scenario
    p = s.training.precision
    assert (p.weights, p.compute, p.gradients) == ("fp32", "bf16", "fp32")
    # GPT-2 small, tied: 50,257 x 768 + 1,024 x 768 = 39,383,808; 12 layers of 12 x 768^2 +
    # 13 x 768 = 7,087,872 (85,054,464); final LayerNorm 1,536: 124,439,808 parameters, their
    # gradients 4 bytes each on every DDP rank (bf16 before: 248,879,616 B)
    inv = build_inventory(resolve(s))
    assert inv.per_gpu["gradients"] == 4 * 124_439_808
