"""`tiersim plan`'s default space under `training.framework: megatron` (review (k), "Found, not
fixed" 1): Megatron-LM without offload refuses every class's home but the GPU's memory and the
optimizer anywhere but the GPU, so the default space leaves those keys out and says so; a
`plan:` section is searched as written."""

from __future__ import annotations

import json

import yaml

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
    keys, why = space.left_out
    assert list(keys) == LEFT_OUT and why.startswith("training.framework: megatron models")
    # without a framework the homes are searched as before: 69,984
    generic = {**MEGATRON, "training": {**MEGATRON["training"], "framework": None}}
    space = _space(tmp_path, generic)
    assert space.size == 69_984 and space.left_out is None


def test_a_plan_section_under_megatron_is_searched_as_written(tmp_path):
    written = {**MEGATRON, "plan": {"parallel.zero_stage": [1, 3]}}
    space = _space(tmp_path, written)
    assert space.keys == ("parallel.zero_stage",) and space.values == ((1, 3),)
    assert space.from_file and space.left_out is None


def test_the_plans_header_and_json_name_the_keys_left_out_and_why(tmp_path):
    space = _space(tmp_path, MEGATRON)
    outcome = PlanOutcome("s.yaml", space, Pruned(checked=144), [], None)
    report = plan_report(outcome, "tokens_per_s", 3)
    assert report["space"]["size"] == 144
    assert report["space"]["left_out"]["keys"] == LEFT_OUT
    head = plan_text(json.loads(json.dumps(report))).splitlines()[0]  # as --format json has it
    assert head == (
        "plan for s.yaml, best by tokens/s; search space (default): 144 candidates; left out: "
        + ", ".join(LEFT_OUT)
        + " (training.framework: megatron models Megatron-LM without offload, its "
        "--optimizer-cpu-offload not modelled: every class stays in the GPU's memory and the "
        "optimizer on the GPU)"
    )
    # a plan: section's report says nothing is left out
    written = _space(tmp_path, {**MEGATRON, "plan": {"parallel.zero_stage": [1, 3]}})
    outcome = PlanOutcome("s.yaml", written, Pruned(checked=2), [], None)
    report = plan_report(outcome, "tokens_per_s", 3)
    assert report["space"]["left_out"] is None
    assert plan_text(report).splitlines()[0].endswith("search space (plan section): 2 candidates")
