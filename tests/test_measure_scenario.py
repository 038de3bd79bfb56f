"""`tiersim measure --scenario FILE`: a scenario's settings as measure's (what a CPU run
honours taken, the rest noted at its key, a generic model refused), checked without training.
Expected settings are read off each scenario by hand; the end-to-end run is in test_measure.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import SCENARIOS, scenario

from tiersim.api import load
from tiersim.cli import main
from tiersim.core.errors import InputError
from tiersim.groundtruth.measure_scenario import measure_settings

TINY = {"layers": 2, "hidden": 64, "heads": 4, "ffn_hidden": 128, "vocab": 256, "max_positions": 64}
FP32 = {"weights": "fp32", "gradients": "fp32", "master": "none", "optimizer": "fp32"}


def settings(training: dict, parallel: dict | None = None, model: dict | None = None, **more):
    raw = {"name": "m", "model": model or TINY, "training": training, **more}
    return measure_settings(scenario(raw | {"parallel": parallel or {}}), "s.yaml")


def keys(got) -> list[str]:
    return [n.path for n in got.notes]


def test_the_shipped_fsdp2_offload_scenario():
    # scenarios/fsdp2-cpu-offload-llama2-7b.yaml: seq_len 4096, micro-batch 2, adamw, fp32
    # weights/gradients/optimizer with bf16 compute, megatron, recompute full, data 8 at
    # ZeRO-3, every class but activations in dram with the optimizer on the CPU
    got = measure_settings(load(SCENARIOS / "fsdp2-cpu-offload-llama2-7b.yaml").scenario, "f")
    assert got.fields == {
        "seq_len": 4096,
        "micro_batch_size": 2,
        "optimizer": "adamw",
        "dtype": "bf16",  # the compute precision: what the activations are held in
        "implementation": "tiersim",  # megatron's accounting predicts tiersim's own modules
        "attention": "eager",  # none set: the kernel its run counts, megatron's eager
        "recompute": "none",  # measure recomputes with transformers' model only
    }
    assert got.fsdp == 8  # ZeRO-3 over 8 data ranks: FSDP2 on 8 CPU ranks, AdamW's shards
    assert keys(got) == [
        "training.precision",
        "training.recompute",
        "placement.weights",
        "placement.gradients",
        "placement.master",
        "placement.optimizer",
        "placement.optimizer_compute",
    ]
    precision = got.notes[0].message
    assert precision.startswith("weights fp32, gradients fp32, optimizer fp32, master none, ")
    assert precision.endswith("measured all bf16") and got.notes[0].code == "W-MEASURE-INSTEAD"


def test_a_scenario_measure_runs_as_it_says_has_no_notes():
    training = {"implementation": "huggingface", "attention_kernel": "eager", "seq_len": 32}
    training |= {"micro_batch_size": 3, "optimizer": "muon", "precision": FP32}
    got = settings(training | {"recompute": "selective"}, {"data": 4, "zero_stage": 3})
    assert got.fields == {
        "seq_len": 32,
        "micro_batch_size": 3,
        "optimizer": "muon",
        "dtype": "fp32",
        "implementation": "huggingface",
        "attention": "eager",
        "recompute": "selective",  # run: FSDP2 with transformers' model (fsdp2_step.py)
    }
    assert got.fsdp == 4 and got.notes == ()


UNHONOURED = {
    "implementation": "torchtitan",
    "attention_kernel": "flash",
    "optimizer": "lion",
    "fp8": {"recipe": "delayed"},
    "loss_fusion": "native",
    "compile": True,
}
SPLIT = {"tensor": 2, "pipeline": 2, "context": 2, "data": 2, "zero_stage": 1}
LLAMA = TINY | {"gated_mlp": True, "norm": "rmsnorm", "position": "rope", "kv_heads": 2}
MIXTRAL = LLAMA | {"experts": 4, "experts_per_token": 2}
H100 = {"preset": "dgx-h100"}  # FP8 needs a GPU that computes it


def test_what_a_cpu_run_cannot_honour_is_noted_at_its_key():
    got = settings(UNHONOURED, SPLIT, LLAMA, hardware=H100)
    assert got.fields == {
        "micro_batch_size": 1,
        "optimizer": "adamw",  # lion: not in PyTorch
        "dtype": "bf16",  # the default precision's compute (bf16 weights, fp32 master)
        "implementation": "huggingface",  # torchtitan: transformers' model instead
        "attention": "sdpa",  # flash: a GPU kernel
        "recompute": "none",
    }
    assert got.fsdp is None
    assert keys(got) == [
        "training.optimizer",
        "training.precision",  # bf16 weights with an fp32 master and fp32 optimizer state
        "training.fp8",
        "training.implementation",
        "training.attention_kernel",
        "parallel.zero_stage",  # ZeRO-1 over 2 ranks: unsharded on one process
        "parallel.tensor",
        "parallel.pipeline",
        "parallel.context",
        "training.loss_fusion",
        "training.compile",
    ]


def test_expert_ranks_are_noted():
    training = {"implementation": "huggingface", "precision": FP32}
    layout = {"expert": 2, "data": 2}  # expert ranks are carved out of the data ranks
    got = settings(training, layout, MIXTRAL)
    assert keys(got) == ["parallel.data", "parallel.expert"]
    assert got.notes[1].message == "2 ranks: measured with every expert on one process"


def test_the_options_typed_win_and_their_keys_notes_go():
    typed = {"optimizer": "adam", "dtype": "fp32", "attention": "eager", "fsdp": None}
    raw = {"name": "m", "model": LLAMA, "training": UNHONOURED, "parallel": SPLIT}
    got = measure_settings(
        scenario(raw | {"hardware": H100}),
        "s.yaml",
        typed | {"implementation": "tiersim", "micro_batch_size": 4},
    )
    assert got.fields == {
        "micro_batch_size": 4,
        "optimizer": "adam",
        "dtype": "fp32",
        "implementation": "tiersim",
        "attention": "eager",
        "recompute": "none",
    }
    # what the options replaced is not noted; FP8 and the splits still are
    assert keys(got)[:2] == ["training.fp8", "parallel.zero_stage"]
    assert "training.optimizer" not in keys(got) and "training.precision" not in keys(got)


@pytest.mark.parametrize(
    "training, parallel, fsdp, noted, said",
    [
        ({}, {"data": 32, "zero_stage": 3}, None, "parallel.data", "at most 16 CPU processes"),
        ({}, {"data": 4, "zero_stage": 0}, None, "parallel.data", "4 replicas: one measured"),
        ({}, {"data": 1, "zero_stage": 3}, None, None, ""),  # nothing sharded: one process
        (
            {"implementation": "huggingface", "optimizer": "sgd"},
            {"data": 2, "zero_stage": 3},
            None,
            "parallel.data",
            "steps adamw or adam or muon or adamw8bit, not sgd",
        ),
        (
            {"implementation": "megatron", "optimizer": "muon"},
            {"data": 2, "zero_stage": 3},
            None,
            "parallel.data",
            "tiersim's modules steps adamw or adam, not muon",
        ),
        (
            {"framework": "deepspeed"},
            {"data": 2, "zero_stage": 3},
            2,
            "training.framework",
            "its ZeRO-3 measured as PyTorch's FSDP2",
        ),
        (
            {"framework": "megatron"},
            {},
            None,
            "training.framework",
            "megatron: measured as a plain PyTorch step, without the engine's own buffers",
        ),
        (
            {"recompute": "full"},
            {},
            None,
            "training.recompute",
            "full: measure recomputes only with transformers' model",
        ),
    ],
)
def test_the_data_parallel_layout_as_fsdp(training, parallel, fsdp, noted, said):
    got = settings({"precision": FP32} | training, parallel)
    assert got.fsdp == fsdp and got.fields["recompute"] == "none"
    assert keys(got) == ([noted] if noted else [])
    assert all(said in n.message for n in got.notes)


def test_recompute_with_transformers_model_runs_on_one_process():
    got = settings({"implementation": "huggingface", "recompute": "full", "precision": FP32})
    assert (got.fsdp, got.fields["recompute"], keys(got)) == (None, "full", [])


def test_torchtitans_op_level_recompute_is_measured_without_recompute():
    training = {"implementation": "torchtitan", "recompute": "selective_op", "precision": FP32}
    got = settings(training, {"data": 2, "zero_stage": 3}, LLAMA)
    # transformers' model under FSDP2 on 2 ranks, but not torchtitan's op-level policy
    assert (got.fields["implementation"], got.fsdp, got.fields["recompute"]) == (
        "huggingface",
        2,
        "none",
    )
    assert keys(got) == ["training.implementation", "training.recompute"]


def test_a_generic_model_is_refused_at_its_key():
    with pytest.raises(InputError) as err:
        settings({}, model={"parameters": 10**6, "layers": 2})
    assert err.value.source == "s.yaml"
    assert [(p.path, p.code) for p in err.value.problems] == [("model.parameters", "E-MEASURE")]


# --- the command: its refusals name the file and the key, or the option typed ----------------


def test_cli_refuses_a_model_measure_cannot_build_in_the_scenarios_terms(write, capsys):
    path = write({"name": "m", "model": MIXTRAL, "training": {"seq_len": 32}})
    assert main(["measure", "--scenario", str(path), "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    # megatron's accounting is tiersim's own modules, which have no mixture of experts
    assert err.startswith(f"{path}: model: experts, experts_per_token: tiersim measure builds")


def test_cli_names_the_option_typed_beside_a_scenario(write, capsys):
    path = write({"name": "m", "model": TINY, "training": {"implementation": "huggingface"}})
    argv = ["measure", "--scenario", str(path), "--attention", "math", "--device", "cpu"]
    assert main(argv) == 2
    assert capsys.readouterr().err.startswith("tiersim measure: --attention: 'math' is tiersim's")


def test_cli_set_applies_to_the_scenario_and_scenario_excludes_model(write, capsys):
    path = write({"name": "m", "model": {"parameters": 10**6, "layers": 2}})
    assert main(["measure", "--scenario", str(path), "--set", "model.parameters=2000000"]) == 2
    assert "(2,000,000 parameters" in capsys.readouterr().err  # the --set value, applied
    with pytest.raises(SystemExit) as exit_:
        main(["measure", "--scenario", str(path), "--model", "gpt2"])
    assert exit_.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_the_files_read_are_not_calibrate_targets(write, capsys):
    path = write({"name": "m", "model": TINY})
    argv = ["measure", "--scenario", str(path), "--implementation", "tiersim"]
    assert main([*argv, "--calibrate", str(path)]) == 2
    assert "--calibrate" in capsys.readouterr().err
    assert Path(path).read_text().startswith("name: m")  # untouched


def test_cli_runs_the_scenarios_zero3_and_recompute_under_fsdp2(write, capsys, monkeypatch):
    # data 3 at ZeRO-3 with transformers' model and full recompute: FSDP2 on 3 gloo ranks,
    # the scenario handed to the ranks recomputing; the notes said before the first stage.
    # The ranks' run is replaced by one that keeps what it is given and stops (^C: 130).
    import sys
    import types

    from tiersim import groundtruth
    from tiersim.groundtruth import measure_hf

    given = []

    def record_fsdp_steps(cells, world):
        given.append((cells, world))
        raise KeyboardInterrupt

    for module, function in (("fsdp2_step", record_fsdp_steps), ("step_timeline", None)):
        fake = types.ModuleType(f"tiersim.groundtruth.{module}")
        setattr(fake, "record_fsdp_steps" if function else "predicted_timeline", function)
        monkeypatch.setitem(sys.modules, fake.__name__, fake)
        monkeypatch.setattr(groundtruth, module, fake, raising=False)
    monkeypatch.setattr(measure_hf, "import_torch", lambda: None)
    training = {"implementation": "huggingface", "recompute": "full", "seq_len": 32}
    raw = {"name": "m", "model": LLAMA, "training": training | {"framework": "deepspeed"}}
    path = write(raw | {"parallel": {"data": 3, "zero_stage": 3}})
    assert main(["measure", "--scenario", str(path)]) == 130
    ((cells, world),) = given
    ((s, dtype),) = cells
    assert (world, dtype, s.training.recompute, s.parallel.data, s.seq_len) == (
        3,
        "bf16",
        "full",
        3,
        32,
    )
    err = capsys.readouterr().err.splitlines()
    assert [line.split(": ")[2] for line in err[:2]] == ["training.precision", "training.framework"]
    assert err[2].startswith("measure: importing PyTorch and transformers: started")
