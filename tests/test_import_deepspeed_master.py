"""DeepSpeed's low-precision master (review 2026-12-07-i: `fp16_master_weights_and_grads`
noted, the master counted fp32). The rules, read in DeepSpeed 0.19.8 (and stage_1_and_2.py at
02aa38c3): config.py asserts ZeRO stage 1, 2 or 3; the ZeRO optimizer's `_enforce_cpu_offload`
asserts the optimizer offloaded with DeepSpeedCPUAdam (Adam / AdamW under the offload, engine.py
`_configure_basic_optimizer`); then the master partition and the host's gradient partition are
fp16 (`master_weights_and_grads_dtype`). bf16's `bf16_master_weights_and_grads` is the same in
bf16, and `bf16_optimizer_states` (bf16 moments) needs it (config.py asserts)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tiersim.frameworks.assemble import ImportOptions, import_configs

GPT2_PARAMETERS = 124_439_808  # GPT-2 small, tied embeddings (the published count)


def _config(master: dict, zero: dict, optimizer: dict | None = None, section: str = "fp16"):
    cfg = {"train_micro_batch_size_per_gpu": 1, section: {"enabled": True, **master},
           "zero_optimization": zero}  # fmt: skip
    if optimizer is not None:
        cfg["optimizer"] = optimizer
    return cfg


def _import(tmp_path: Path, cfg: dict):
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(cfg))
    overrides = ("model.preset=gpt2", "training.seq_len=128")
    return import_configs([path], ImportOptions(gpus=2, overrides=overrides)), path


OFFLOAD2 = {"stage": 2, "offload_optimizer": {"device": "cpu"}}


def test_fp16_master_under_zero2_cpu_offload_is_an_fp16_master(tmp_path, cli_json):
    cfg = _config({"fp16_master_weights_and_grads": True}, OFFLOAD2, {"type": "AdamW"})
    imp, _ = _import(tmp_path, cfg)
    s = imp.loaded.scenario
    assert (s.training.precision.weights, s.training.precision.master) == ("fp16", "fp16")
    # the gradient partition the CPU Adam steps is fp16 too: no fp32 boundary copy
    assert s.training.offload.boundary_gradients == "stored"
    scenario = tmp_path / "s.yaml"
    scenario.write_text(imp.yaml_text())
    inv = cli_json(scenario)["inventory"]
    # 2 bytes a parameter (it was 4: 497,759,232), sharded over data 2 by ZeRO
    assert inv["dense"]["master"] == 2 * GPT2_PARAMETERS == 248_879_616
    assert inv["per_gpu"]["master"] == 2 * GPT2_PARAMETERS // 2


@pytest.mark.parametrize(
    ("cfg", "key", "why"),
    [
        (_config({"fp16_master_weights_and_grads": True}, {"stage": 0}),
         "fp16.fp16_master_weights_and_grads", "is only supported with ZeRO Stage 1, 2, or 3"),
        (_config({"fp16_master_weights_and_grads": True}, {"stage": 2}),
         "fp16.fp16_master_weights_and_grads", "requires ZeRO-2 Offload with DeepSpeedCPUAdam"),
        (_config({"fp16_master_weights_and_grads": True}, OFFLOAD2, {"type": "Lion"}),
         "fp16.fp16_master_weights_and_grads", "optimizer.type Lion"),
        (_config({"fp16_master_weights_and_grads": True}, OFFLOAD2,
                 {"type": "Adam", "params": {"torch_adam": True}}),
         "fp16.fp16_master_weights_and_grads", "torch's Adam"),
        (_config({"bf16_optimizer_states": True}, {"stage": 1}, section="bf16"),
         "bf16.bf16_optimizer_states", "requires bf16_master_weights_and_grads"),
        (_config({"bf16_master_weights_and_grads": True, "bf16_optimizer_states": True},
                 OFFLOAD2, {"type": "AdamW"}, section="bf16"),
         "bf16.bf16_optimizer_states", "fp32_optimizer_states=False"),
        (_config({"fp16_master_weights_and_grads": "yes"}, OFFLOAD2),
         "fp16.fp16_master_weights_and_grads", "expected true or false"),
    ],
)  # fmt: skip
def test_low_precision_master_refused_where_deepspeed_refuses_it(cli, tmp_path, cfg, key, why):
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(cfg))
    code, _, err = cli("import", path, "--gpus", "2", "--set", "model.preset=gpt2")
    assert code == 2
    assert err.startswith(f"{path}: {key}: ") and why in err and "Traceback" not in err


def test_bf16_master_and_optimizer_states_stay_on_the_gpu(tmp_path):
    # bf16 optimizer states: no offload needed (base_optimizer.py checks the offload only
    # where the states stay fp32 or are offloaded)
    flags = {"bf16_master_weights_and_grads": True, "bf16_optimizer_states": True}
    imp, _ = _import(tmp_path, _config(flags, {"stage": 1}, {"type": "AdamW"}, "bf16"))
    p = imp.loaded.scenario.training.precision
    assert (p.weights, p.master, p.optimizer) == ("bf16", "bf16", "bf16")


def test_false_is_deepspeeds_default_fp32_master(tmp_path):
    imp, _ = _import(tmp_path, _config({"fp16_master_weights_and_grads": False}, OFFLOAD2))
    assert imp.loaded.scenario.training.precision.master == "fp32"
    assert "fp16_master_weights_and_grads: false: DeepSpeed's default" in "\n".join(
        imp.note_lines()
    )


def test_emit_deepspeed_writes_the_fp16_master_back(tmp_path):
    from tiersim.frameworks.emit import emit

    cfg = _config({"fp16_master_weights_and_grads": True}, OFFLOAD2, {"type": "AdamW"})
    imp, _ = _import(tmp_path, cfg)
    written = emit(imp.loaded.scenario, "deepspeed")
    assert json.loads(written.text)["fp16"] == {
        "enabled": True,
        "fp16_master_weights_and_grads": True,
    }
    # read back to the same master: no note names it
    assert not [n for n in written.notes if "master" in n.path]
