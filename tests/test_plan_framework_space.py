"""`tiersim plan`'s default space under `training.framework: megatron` (review (k), "Found, not
fixed" 1): Megatron-LM without offload refuses every class's home but the GPU's memory and the
optimizer anywhere but the GPU, so the default space leaves those keys out and says so; a
`plan:` section is searched as written."""

from __future__ import annotations

import json

import yaml
from conftest import SCENARIOS

from tiersim.config.load import load_scenario
from tiersim.config.yamlfile import read_yaml
from tiersim.plan.check import checked_space
from tiersim.plan.prune import Pruned
from tiersim.plan.report import plan_report, plan_text
from tiersim.plan.run import PlanOutcome

MEGATRON = {
    "name": "tiny-megatron",
    "model": {
        "layers": 2,
        "hidden": 256,
        "heads": 4,
        "ffn_hidden": 1024,
        "vocab": 1000,
        "position": "rope",
    },
    "training": {
        "framework": "megatron",
        "micro_batch_size": 1,
        "grad_accumulation": 8,
        "seq_len": 256,
    },
    "parallel": {"data": 2},
    "hardware": {"preset": "dgx-h100"},  # three tiers: hbm, dram, nvme
}
WHY = (
    "training.framework: megatron models Megatron-LM without offload, its "
    "--optimizer-cpu-offload not modelled: every class stays in the GPU's memory and the "
    "optimizer on the GPU"
)
LEFT_OUT = [
    "placement.weights",
    "placement.gradients",
    "placement.master",
    "placement.optimizer",
    "placement.activations",
    "placement.optimizer_compute",
]


def _space(tmp_path, scenario):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(scenario))
    return _shipped(path)


def _shipped(path):
    return checked_space(load_scenario(path, []), read_yaml(path, str(path)), path)


def test_the_default_space_under_megatron_leaves_out_the_homes_and_the_optimizer_site(tmp_path):
    space = _space(tmp_path, MEGATRON)
    # before: 3 tiers for each of 5 classes x 2 optimizer sites x 4 ZeRO stages x 3 recompute
    # modes x micro-batch 1/2/4/8 (each divides 8) x prefetch 1/2/4 = 3**5 x 2 x 144 = 69,984,
    # 69,840 of them refused (every one with an offload home or the CPU's optimizer)
    assert 3**5 * 2 * 4 * 3 * 4 * 3 == 69_984
    # now: 4 ZeRO stages x 3 recompute modes x 4 micro-batch sizes x 3 prefetch depths = 144
    assert space.size == 4 * 3 * 4 * 3 == 144
    assert set(space.keys) == {
        "parallel.zero_stage",
        "training.recompute",
        "training.micro_batch_size",
        "simulation.prefetch_depth",
    }
    ((keys, why),) = space.left_out
    assert list(keys) == LEFT_OUT and why.startswith("training.framework: megatron models")
    # without a framework the homes are searched as before: 69,984
    generic = {**MEGATRON, "training": {**MEGATRON["training"], "framework": None}}
    space = _space(tmp_path, generic)
    assert space.size == 69_984 and space.left_out == ()


def test_a_plan_section_under_megatron_is_searched_as_written(tmp_path):
    written = {**MEGATRON, "plan": {"parallel.zero_stage": [1, 3]}}
    space = _space(tmp_path, written)
    assert space.keys == ("parallel.zero_stage",) and space.values == ((1, 3),)
    assert space.from_file and space.left_out == ()


def test_the_plans_header_and_json_name_the_keys_left_out_and_why(tmp_path):
    space = _space(tmp_path, MEGATRON)
    outcome = PlanOutcome("s.yaml", space, Pruned(checked=144), [], None)
    report = plan_report(outcome, "tokens_per_s", 3)
    assert report["space"]["size"] == 144
    assert report["space"]["left_out"] == [{"left": LEFT_OUT, "why": WHY}]
    head = plan_text(json.loads(json.dumps(report))).splitlines()[0]  # as --format json has it
    assert head == (
        "plan for s.yaml, best by tokens/s; search space (default): 144 candidates; left out: "
        + ", ".join(LEFT_OUT)
        + f" ({WHY})"
    )
    # a plan: section's report says nothing is left out
    written = _space(tmp_path, {**MEGATRON, "plan": {"parallel.zero_stage": [1, 3]}})
    outcome = PlanOutcome("s.yaml", written, Pruned(checked=2), [], None)
    report = plan_report(outcome, "tokens_per_s", 3)
    assert report["space"]["left_out"] == []
    assert plan_text(report).splitlines()[0].endswith("search space (plan section): 2 candidates")


def test_apexs_zero_stage_and_an_interleaved_schedules_micro_batch_sizes_are_left_out():
    """After the homes, NeMo's apex scenarios still had 108 of 144 default candidates invalid
    (apex: ZeRO 1 only) and Narayanan's interleaved 310.1B 108 (micro-batches a multiple of
    the pipeline size): both refused for every candidate, so left out too."""
    # apex over 4 data ranks: no ZeRO axis; recompute 3 x micro-batch 1/2/4/8 (divide 32) x
    # prefetch 3 = 36 (it was 4 x 36 = 144 with ZeRO 0, 2, 3 refused)
    space = _shipped(SCENARIOS / "published" / "nemo2407-llama3-8b-8gpus.yaml")
    assert space.size == 3 * 4 * 3 == 36 and "parallel.zero_stage" not in space.keys
    assert space.left_out[1] == (
        ("parallel.zero_stage",),
        "training.distributed_optimizer: apex shards the optimizer state over the data ranks "
        "and keeps a whole gradient buffer: ZeRO 1 only",
    )
    # pipeline 16, virtual 2, batch per GPU 1 x 144: micro-batch 1 leaves 144 micro-batches
    # (9 x 16); 2, 4, 8 leave 72, 36, 18, none a multiple of 16: ZeRO 4 x recompute 3 x
    # micro-batch 1 x prefetch 3 = 36 (was 144)
    space = _shipped(SCENARIOS / "published" / "narayanan2021-310.1b.yaml")
    assert dict(zip(space.keys, space.values, strict=True))["training.micro_batch_size"] == (1,)
    assert space.size == 4 * 3 * 1 * 3 == 36
    assert space.left_out[1] == (
        (
            "training.micro_batch_size=2",
            "training.micro_batch_size=4",
            "training.micro_batch_size=8",
        ),
        "interleaving needs the micro-batches (the batch per GPU 144 over the micro-batch "
        "size) to be a multiple of the pipeline size (16)",
    )
