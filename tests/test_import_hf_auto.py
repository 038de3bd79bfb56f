"""`tiersim import` of a DeepSpeed config written for the HuggingFace Trainer, whose values are
"auto" (tiersim/frameworks/hf_auto.py): what transformers' integration (5.25.0,
integrations/deepspeed.py, `HfTrainerDeepSpeedConfig`) fills is taken from the rest of the
input or tiersim's default, with a note; an "auto" nothing fills is refused, exit 2, with
its key path."""

from __future__ import annotations

import json

import yaml

import tiersim

# transformers' documented ZeRO-3 config (docs "DeepSpeed", ds_config_zero3.json), cut to
# the keys tiersim reads and those it notes
ZERO3 = {
    "fp16": {"enabled": "auto", "loss_scale": 0},
    "bf16": {"enabled": "auto"},
    "optimizer": {"type": "AdamW", "params": {"lr": "auto", "weight_decay": "auto"}},
    "zero_optimization": {
        "stage": 3,
        "overlap_comm": True,
        "reduce_bucket_size": "auto",
        "stage3_prefetch_bucket_size": "auto",
        "stage3_param_persistence_threshold": "auto",
        "stage3_max_live_parameters": 1e9,
    },
    "gradient_accumulation_steps": "auto",
    "gradient_clipping": "auto",
    "train_batch_size": "auto",
    "train_micro_batch_size_per_gpu": "auto",
}


def _import(cli, tmp_path, cfg: dict, *extra):
    path = tmp_path / "ds_config.json"
    path.write_text(json.dumps(cfg))
    out = tmp_path / "back.yaml"
    code, _, err = cli("import", path, "--set", "model.preset=gpt2", "--gpus", "8", "--out", out,
                       *extra)  # fmt: skip
    return code, err, (yaml.safe_load(out.read_text()) if code == 0 else None)


def test_the_trainer_s_auto_values_are_filled_as_it_fills_them(cli, tmp_path):
    code, err, raw = _import(cli, tmp_path, ZERO3)
    assert code == 0, err
    # GPT-2's hidden size 768 (the gpt2 preset): trainer_config_finalize's rules by hand:
    # reduce_bucket_size 768 x 768 = 589,824; under ZeRO-3 stage3_prefetch_bucket_size
    # int(0.9 x 589,824) = int(530,841.6) = 530,841, stage3_param_persistence_threshold
    # 10 x 768 = 7,680
    assert raw["training"]["offload"]["reduce_bucket_size"] == 589_824
    assert raw["training"]["offload"]["prefetch_bucket_size"] == 530_841
    assert raw["training"]["deepspeed"]["stage3_param_persistence_threshold"] == 7_680
    said = "zero_optimization.reduce_bucket_size: 'auto': hidden_size x hidden_size = 589,824"
    assert said in err
    # the Trainer's arguments are not in the input: tiersim's defaults (micro-batch 1, no
    # accumulation, its default precision bf16), each said
    training = tiersim.load_scenario(tmp_path / "back.yaml").scenario.training
    assert (training.micro_batch_size, training.grad_accumulation) == (1, 1)
    # left to tiersim's default, not DeepSpeed's own fp32 without an enabled section
    assert "precision" not in raw["training"] and training.precision.weights == "bf16"
    for key in ("train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "fp16.enabled"):
        line = next(x for x in err.splitlines() if f"{key}: 'auto'" in x)
        assert "W-IMPORT-ASSUMED" in line and "transformers' Trainer fills it from" in line


def test_the_rest_of_the_input_fills_what_it_gives(cli, tmp_path):
    # a number beside the "auto": DeepSpeed's batch rule gives the micro-batch (64 / (2 x 8
    # ranks) = 4); an enabled bf16 section decides the precision; a --set bucket wins
    cfg = {**ZERO3, "train_batch_size": 64, "gradient_accumulation_steps": 2}
    cfg["bf16"] = {"enabled": True}
    code, err, raw = _import(
        cli, tmp_path, cfg, "--set", "training.offload.reduce_bucket_size=1000"
    )
    assert code == 0, err
    assert raw["training"]["micro_batch_size"] == 4
    assert raw["training"]["precision"]["weights"] == "bf16"
    assert "fp16.enabled: 'auto'" in err and "bf16 from bf16.enabled" in err
    assert raw["training"]["offload"]["reduce_bucket_size"] == 1000


def test_an_auto_nothing_fills_is_refused_with_its_key(cli, tmp_path):
    # the Trainer fills no stage, and stage3 keys only under ZeRO-3: DeepSpeed reads the
    # string itself and refuses it
    for zero, key in (
        ({"stage": "auto"}, "zero_optimization.stage"),
        ({"stage": 2, "stage3_prefetch_bucket_size": "auto"},
         "zero_optimization.stage3_prefetch_bucket_size"),
        ({"stage": 3, "overlap_comm": "auto"}, "zero_optimization.overlap_comm"),
    ):  # fmt: skip
        code, err, _ = _import(cli, tmp_path, {**ZERO3, "zero_optimization": zero})
        assert code == 2, err
        assert f"{key}: is 'auto'" in err and "E-IMPORT-VALUE" in err
    code, err, _ = _import(cli, tmp_path, {**ZERO3, "activation_checkpointing": "auto"})
    assert code == 2 and "activation_checkpointing: is 'auto', which transformers' Trainer" in err
