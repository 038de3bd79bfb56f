"""Review 2026-12-07 (m): a performance engineer's pass over what landed in 0.23.0 (`measure
--scenario`, `import` of an Accelerate config, DeepSpeed ZeRO-1 with the CPU optimizer, bad
input; docs/review-2026-12-07-m.md). Each test fails on the tree before its fix; expected
values are worked by hand in each. None trains a model or imports PyTorch."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from conftest import scenario

from tiersim.cli import main
from tiersim.core.errors import InputError

ROOT = Path(__file__).resolve().parent.parent
# Llama-style, 1 layer of width 64, 4 heads, no learned positions
TINY = {"layers": 1, "hidden": 64, "heads": 4, "ffn_hidden": 128, "vocab": 128}
TINY |= {"norm": "rmsnorm", "position": "rope", "gated_mlp": True}


def test_measure_of_a_megatron_scenario_runs_the_kernel_its_run_counts():
    """`measure --scenario` of a scenario under `framework: megatron` with no
    `attention_kernel` trained sdpa, measure's own default, while `inventory` and `run` of the
    same file count megatron's eager attention (the inventory's header: "megatron, eager
    attention"; `run` writes `attention_kernel: eager` into its scenario.yaml): the measured
    activations were of another kernel than the prediction beside them."""
    from tiersim.groundtruth.measure_scenario import measure_settings

    raw = {"name": "m", "model": TINY, "training": {"framework": "megatron", "seq_len": 32}}
    assert measure_settings(scenario(raw), "s.yaml").fields["attention"] == "eager"
    # transformers' code: its default, sdpa, as before; a kernel the file names is kept
    raw["training"]["implementation"] = "huggingface"
    assert measure_settings(scenario(raw), "s.yaml").fields["attention"] == "sdpa"
    raw["training"]["attention_kernel"] = "eager"
    assert measure_settings(scenario(raw), "s.yaml").fields["attention"] == "eager"


def test_measures_memory_refusal_names_the_tokens_where_they_are_the_bulk(monkeypatch):
    """`measure --scenario s.yaml --set training.seq_len=1000000000` on a 1-layer model was
    refused at `model` with "pick a smaller model or shrink it, e.g. --set model.layers=2": the
    bytes were the sequence's, and the model had 1 layer already."""
    import tiersim.groundtruth.measure as measure_module

    raw = {"name": "m", "model": TINY, "training": {"seq_len": 32, "micro_batch_size": 10**6}}
    s = scenario(raw)
    monkeypatch.setattr(measure_module, "physical_memory", lambda: 10**9)
    # the logits alone: 12 B x 32 tokens x 10^6 sequences x 128 = 49.15 GB, against state of
    # a few hundred kB (64 x 128 embeddings, one 64-wide layer): the tokens are the bulk
    with pytest.raises(InputError) as err:
        measure_module.check_fits(None, s, "cpu")
    problem = err.value.problems[0]
    assert problem.path == "training.micro_batch_size"  # 10^6 > 32: the larger of the two
    assert problem.message.startswith("32 tokens x micro-batch 1,000,000: one measured step")
    assert problem.message.endswith(
        "but this cpu has 1.00 GB (expected fewer tokens a micro-batch: a shorter seq_len or "
        "a smaller micro_batch_size)"
    )
    # the model the bulk: said at `model`, as before
    raw = {"name": "m", "model": TINY | {"hidden": 4096, "ffn_hidden": 16384, "heads": 32}}
    with pytest.raises(InputError) as err:
        measure_module.check_fits(None, scenario(raw | {"training": {"seq_len": 32}}), "cpu")
    assert err.value.problems[0].path == "model"


@pytest.mark.parametrize("line, key", [("distributed_type: NO", "distributed_type"),
                                       ("mixed_precision: no", "mixed_precision")])  # fmt: skip
def test_an_unquoted_no_in_an_accelerate_config_says_yaml_read_it_as_false(
    tmp_path, capsys, line, key
):
    """A hand-written `distributed_type: NO` (or `mixed_precision: no`) is YAML 1.1's false:
    the refusal said "is False (expected a string)", not why a word became a boolean nor how
    to write it (`accelerate config` writes it quoted, 'NO')."""
    path = tmp_path / "acc.yaml"
    others = "num_processes: 8\n" + (
        "" if key == "distributed_type" else "distributed_type: FSDP\n"
    )
    path.write_text(f"{line}\n{others}")
    hf = ROOT / "tests" / "fixtures" / "gpt2.config.json"
    assert main(["import", str(path), "--from", "accelerate", "--hf-config", str(hf)]) == 2
    assert capsys.readouterr().err == (
        f"{path}: {key}: is False (expected a string; YAML reads an unquoted no or off, in any "
        "case, as False: quote the word, 'NO' or 'no') [E-IMPORT-VALUE]\n"
    )


def test_the_inventory_says_zero1_cpu_gradients_are_a_partition_on_the_host(write, capsys):
    """DeepSpeed ZeRO-1 with the CPU optimizer: the host holds the rank's gradient partition
    (state/zero1_offload.py), so the per-GPU column shows gradients / data; the ZeRO-sharded
    column said "no" beside it."""
    raw = {
        "name": "z1",
        "model": {"parameters": 10**9, "layers": 4},
        "training": {"framework": "deepspeed", "precision": {"weights": "bf16",
                     "gradients": "bf16", "master": "fp32", "optimizer": "fp32"}},
        "parallel": {"data": 4, "zero_stage": 1},
        "placement": {"gradients": "dram", "master": "dram", "optimizer": "dram",
                      "optimizer_compute": "cpu"},
        "hardware": {"preset": "dgx-h100"},
    }  # fmt: skip
    assert main(["inventory", str(write(raw))]) == 0
    lines = capsys.readouterr().out.splitlines()[:10]  # keyed by the class, "gradients (GPU)" too
    rows = {re.split(r"\s{2,}", line)[0]: line.split() for line in lines}
    # 10^9 bf16 gradients = 2 GB, a quarter on each rank's host: 500 MB
    assert rows["gradients"] == ["gradients", "2.00", "GB", "500.00", "MB", "host:", "yes", "dram"]
    assert rows["master"][-2:] == ["yes", "dram"]  # 4 GB / 4 = 1 GB, ZeRO-sharded
    assert rows["weights"][-2:] == ["no", "hbm"]


def test_commands_md_lists_every_format_import_reads(capsys):
    """docs/commands.md's `import` row gave `--from deepspeed|megatron|torchtitan` and no
    Accelerate config, which `import --help` and docs/import.md list since 0.23.0."""
    with pytest.raises(SystemExit):
        main(["import", "--help"])
    choices = re.search(r"--from \{([a-z,]+)\}", capsys.readouterr().out).group(1).split(",")
    assert "accelerate" in choices
    row = next(
        line
        for line in (ROOT / "docs" / "commands.md").read_text().splitlines()
        if line.startswith("| `tiersim import ")
    )
    assert "[--from " + "\\|".join(choices) + "]" in row  # `|` escaped in a table cell
    assert "Accelerate config YAML" in row


def test_a_heads_override_beside_a_presets_kv_heads_says_what_to_set(write, capsys):
    """`--set model.heads=4` on Llama-2-7B (kv_heads 32 from the preset) was refused with
    "heads (4) must be a multiple of kv_heads (32)": the 32 was nowhere the user typed, and
    nothing said what to write."""
    path = write({"name": "m", "model": {"preset": "llama-2-7b"}})
    assert main(["validate", str(path), "--set", "model.heads=4"]) == 2
    err = capsys.readouterr().err
    assert (
        "heads (4) must be a multiple of kv_heads (32) (expected kv_heads dividing heads: set "
        "model.kv_heads too where a preset gives it) (from --set model.heads=4)" in err
    )


@pytest.mark.parametrize(
    "cfg, said",
    [
        ({"num_processes": 8, "num_machines": 3},
         "num_processes: is 8, not a multiple of num_machines 3 (GPUs a machine; expected a "
         "multiple of 3, the same number of processes on each machine)"),
        ({"fsdp_config": {"fsdp_activation_checkpointing_offload": True}},
         "fsdp_config.fsdp_activation_checkpointing_offload: true requires "
         "fsdp_activation_checkpointing: true (Accelerate raises ValueError: "
         "`fsdp_activation_checkpointing_offload=True` requires it; expected "
         "fsdp_activation_checkpointing: true beside it, or false)"),
        # 1 x 1 x 3 x 1 = 3 ranks of 16
        ({"num_processes": 16, "fsdp_config": {"fsdp_version": 2},
          "parallelism_config": {"parallelism_config_tp_size": 3}},
         "parallelism_config: dp_replicate 1 x dp_shard 1 x tp 3 x cp 1 = 3, not num_processes "
         "16 (Accelerate raises 'ParallelismConfig total_size ... does not match "
         "num_processes'; expected sizes whose product is 16)"),
        ({"num_processes": 4, "fsdp_config": {"fsdp_version": 2},
          "parallelism_config": {"parallelism_config_tp_size": 4}},
         "parallelism_config.parallelism_config_dp_shard_size: is 1 beside cp_size 1 "
         "(Accelerate raises 'FSDP is enabled but the parallelism config has no dimension for "
         "FSDP to shard across'; expected dp_shard_size or cp_size over 1)"),
    ],
)  # fmt: skip
def test_accelerates_refusals_say_what_to_write(tmp_path, capsys, cfg, said):
    """Four of the Accelerate import's refusals said what is wrong and what Accelerate
    raises, but not what to write instead (every other refusal's "expected ...")."""
    path = tmp_path / "acc.yaml"
    path.write_text(yaml.safe_dump({"distributed_type": "FSDP", **cfg}))
    hf = ROOT / "tests" / "fixtures" / "gpt2.config.json"
    assert main(["import", str(path), "--hf-config", str(hf)]) == 2
    assert capsys.readouterr().err == f"{path}: {said} [E-IMPORT-VALUE]\n"


def test_setting_the_nvlink_rows_bandwidth_names_the_network_key(write, capsys):
    """`run`'s link table has an `nvlink` row (the GPUs' network in the node); `--set
    hardware.links.nvlink.bandwidth="900 GB/s"` (what if NVLink were twice as fast?) was refused
    with only "hardware.links.nvlink.between: required key is missing": a new link half made,
    nothing said of the key that sets that row."""
    path = write({"name": "m", "model": {"preset": "gpt2"}, "hardware": {"preset": "dgx-h100"}})
    argv = ["validate", str(path), "--set", "hardware.links.nvlink.bandwidth=900 GB/s"]
    assert main(argv) == 2
    err = capsys.readouterr().err.splitlines()
    # dgx-h100's links (tiersim/presets/hardware/dgx-h100.yaml): pcie and nvme
    assert err[0] == (
        f"{path}: --set hardware.links.nvlink.bandwidth: 'nvlink' is not in hardware.links "
        "(pcie, nvme): the nvlink row of `run`'s link table is the GPUs' network (expected "
        "hardware.network.intra_node_bandwidth, intra_node_latency or intra_node_efficiency) "
        "[E-SET]"
    )
    assert err[1].startswith(f"{path}: hardware.links.nvlink.between: required key is missing")


def test_a_mapping_of_names_given_a_scalar_says_what_to_write(write, capsys):
    """`plan: [training.seq_len]` or `--set hardware.gpu.peak_flops=5` said pydantic's "input
    should be a valid dictionary": Python's word, and nothing of what such a mapping holds."""
    path = write("name: m\nmodel: {preset: gpt2}\nplan: [training.seq_len]\n")
    assert main(["validate", str(path), "--set", "hardware.gpu.peak_flops=5"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"{path}: hardware.gpu.peak_flops: expected a mapping of names to values, e.g. {{bf16: "
        "989 TFLOP/s} (got 5) (from --set hardware.gpu.peak_flops=5) [E-TYPE]",
        f"{path}: plan: expected a mapping of names to values, e.g. {{training.micro_batch_size: "
        "[1, 2]} (got ['training.seq_len']) (line 3) [E-TYPE]",
    ]


@pytest.mark.parametrize(
    "extra, collectives",
    [
        # overlap_tensor_backward (megatron's default): per layer 2 all-reduces forward and 2
        # backward, each 2(t-1)/t = 1 buffer at t = 2; the embedding's forward all-reduce and
        # the head's backward one: (4 x 2 layers + 2) = 10 buffers a micro-batch
        ({}, 10.0),
        # sequence parallelism with overlap_tensor_forward: all-gathers and reduce-scatters,
        # each (t-1)/t = 1/2 buffer; per layer 2 pairs forward, backward 2 all-gathers and 2
        # pairs (10 x 1/2 = 5 buffers), x 2 layers; the embedding's reduce-scatter (1/2), the
        # head's all-reduce (1), its all-gather and reduce-scatter (1/2 each): 12.5
        ({"sequence": True, "overlap_tensor_forward": True}, 12.5),
    ],
)
def test_the_link_table_counts_the_hidden_tensor_parallel_collectives(
    write, capsys, extra, collectives
):
    """`run`'s link table counted only the tensor-parallel collectives the engine runs as
    flows: those hidden behind computation (`overlap_tensor_backward`, on by default under
    `framework: megatron`; `overlap_tensor_forward`), priced as the SM share they take, were
    left out, though their bytes cross NVLink: Llama-2-7B at TP 2 showed 17.45 GB of
    tensor-group bytes a step where 34.90 GB cross it (docs/link-bytes.md)."""
    raw = {
        "name": "tp",
        "model": {"layers": 2, "hidden": 1024, "heads": 8, "ffn_hidden": 4096, "vocab": 1000,
                  "norm": "rmsnorm", "position": "rope"},
        "training": {"framework": "megatron", "micro_batch_size": 1, "grad_accumulation": 2,
                     "seq_len": 128, "precision": {"weights": "bf16", "gradients": "bf16",
                                                   "master": "fp32", "optimizer": "fp32"}},
        "parallel": {"tensor": 2, **extra},
        "hardware": {"preset": "dgx-h100"},
    }  # fmt: skip
    path = write(raw)
    assert main(["run", str(path), "--format", "json", "--out", str(path.parent / "o")]) == 0
    links = json.loads(capsys.readouterr().out)["links"]
    buffer = 128 * 1 * 1024 * 2  # s x b x h at bf16: 262,144 B
    assert links["nvlink"]["bytes_by_direction"] == {"tensor": int(2 * collectives * buffer)}


def test_measures_set_of_a_training_key_names_the_options_and_scenario(capsys):
    """`measure --model gpt2 --set training.seq_len=5` said "use the other options for the
    training shape": which options, and that `--scenario FILE` takes any key with --set (new in
    0.23.0), were not said."""
    assert main(["measure", "--model", "gpt2", "--set", "training.seq_len=5"]) == 2
    assert capsys.readouterr().err == (
        "tiersim measure: --set: 'training.seq_len=5': only model dimensions can be overridden "
        "here (expected model.KEY=VALUE; the training shape is --seq-len, --micro-batch-size, "
        "--optimizer, --dtype, ...; with --scenario FILE, --set takes any key) [E-SET]\n"
    )


def test_a_hidden_collective_that_outlasts_its_pass_is_exposed_not_a_bug(write, capsys):
    """With the hidden tensor-parallel bytes counted, a link too slow for them (NVLink at
    100 MB/s, no latency, full efficiency) showed the priced model's gap: each hidden
    collective cost only its SM share, so the step was shorter than its bytes take, and the
    report's check stopped it as a bug (exit 70, "bandwidth_utilization ... 3.87"). The part
    that outlasts the pass beside it is now exposed."""
    raw = {
        "name": "tp",
        "model": {"layers": 2, "hidden": 1024, "heads": 8, "ffn_hidden": 4096, "vocab": 1000,
                  "norm": "rmsnorm", "position": "rope"},
        "training": {"framework": "megatron", "micro_batch_size": 1, "grad_accumulation": 2,
                     "seq_len": 128, "precision": {"weights": "bf16", "gradients": "bf16",
                                                   "master": "fp32", "optimizer": "fp32"}},
        "parallel": {"tensor": 2, "sequence": True, "overlap_tensor_forward": True},
        "hardware": {"preset": "dgx-h100", "network": {"intra_node_bandwidth": "100 MB/s",
                     "intra_node_latency": "0 s", "intra_node_efficiency": 1.0}},
    }  # fmt: skip
    path = write(raw)
    assert main(["run", str(path), "--format", "json", "--out", str(path.parent / "o")]) == 0
    got = json.loads(capsys.readouterr().out)
    # 12.5 buffers of 262,144 B a micro-batch (the test above), 2 micro-batches: 6,553,600 B
    # at 10^8 B/s take 65.536 ms, which the step cannot be shorter than
    assert got["links"]["nvlink"]["bytes"] == 6_553_600
    assert got["step"]["time_s"] >= 6_553_600 / 1e8


def test_a_json_boolean_where_a_word_goes_gets_no_yaml_hint(tmp_path, capsys):
    """The unquoted-no hint is YAML's: a DeepSpeed JSON `"device": true` is JSON's own true."""
    path = tmp_path / "ds.json"
    path.write_text(
        json.dumps({"zero_optimization": {"stage": 3, "offload_param": {"device": True}}})
    )
    hf = ROOT / "tests" / "fixtures" / "gpt2.config.json"
    assert main(["import", str(path), "--hf-config", str(hf)]) == 2
    assert capsys.readouterr().err == (
        f"{path}: zero_optimization.offload_param.device: is True (expected a string) "
        "[E-IMPORT-VALUE]\n"
    )


def test_a_plan_key_given_one_value_shows_it_as_a_list(write, capsys):
    """`plan: {training.micro_batch_size: 3}` said "expected a list of the values to consider,
    e.g. [hbm, hbf]": tiers, for a micro-batch size."""
    path = write({"name": "m", "model": {"preset": "gpt2"}})
    assert main(["validate", str(path), "--set", "plan={training.micro_batch_size: 3}"]) == 2
    assert capsys.readouterr().err == (
        f"{path}: plan.training.micro_batch_size: is 3 (expected a list of the values to "
        "consider, e.g. [3]) (from --set plan={training.micro_batch_size: 3}) [E-PLAN]\n"
    )


def test_a_checkpoint_interval_of_thousands_of_steps_has_its_separator(tmp_path, capsys):
    """`run`'s checkpoint line said `every 20607 steps` (Daly's optimum at a 50,000 h GPU
    MTBF) where every other count it prints has its thousands separated (`10,454 steps/day`,
    the wear line's `checkpointing every 1,221 steps`)."""
    seed = ROOT / "scenarios" / "seed-1b-adam.yaml"
    argv = ["run", str(seed), "--out", str(tmp_path), "--set", "checkpoint.every_steps=12345"]
    assert main(argv) == 0
    (line,) = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("Checkpoint (")]
    assert line.startswith("Checkpoint (blocking to nvme, every 12,345 steps): ")


def test_a_huge_count_option_is_refused_at_the_option(capsys):
    """`import ds.json --gpus 100000000000000000000` was refused as "imported scenario:
    parallel.data: input should be at most 1,099,511,627,776": a key the user never typed,
    in a file that is not there; the option is said now, at argparse's exit 2."""
    with pytest.raises(SystemExit) as exit_:
        main(["import", "ds.json", "--gpus", str(10**20)])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.endswith(
        "tiersim import: error: argument --gpus: must be at most 1,099,511,627,776 (2^40, the "
        "bound on every count; got 100000000000000000000)\n"
    )
