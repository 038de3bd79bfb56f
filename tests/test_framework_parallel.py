"""`training.framework` brings its parallel engine's overlap defaults
(tiersim/config/framework_parallel.py), each overridable, resolved into the execution plan
and into the scenario.yaml a run writes."""

from __future__ import annotations

import pytest
import yaml
from conftest import scenario

from tiersim.config.document import scenario_document
from tiersim.report.output import scenario_yaml
from tiersim.state.resolved import resolve
from tiersim.workload.comms import alone_s, tensor_comms
from tiersim.workload.work import build_workload

KEYS = ("overlap_tensor_backward", "overlap_gradient_reduce", "overlap_tensor_forward")


def gpt(framework=None, **parallel):
    raw = {
        "name": "f",
        "model": {"preset": "megatron-22b"},
        "training": {"framework": framework, "seq_len": 2048, "micro_batch_size": 1},
        "parallel": {"tensor": 8, **parallel},
        "hardware": {"preset": "dgx-a100"},
    }
    return scenario(raw)


def overlaps(s) -> tuple[bool, ...]:
    par = resolve(s).execution.parallel
    return tuple(getattr(par, k) for k in KEYS)


def test_megatron_brings_its_own_defaults():
    # Megatron-LM: async TP backward all-reduce on; --overlap-grad-reduce and
    # --tp-comm-overlap off unless given
    assert overlaps(gpt("megatron")) == (True, False, False)
    # no framework: tiersim's generic engine, as before
    assert overlaps(gpt()) == (False, True, False)
    assert overlaps(gpt("deepspeed")) == (False, True, False)


def test_a_given_key_overrides_the_frameworks_default():
    s = gpt("megatron", overlap_tensor_backward=False, overlap_gradient_reduce=True)
    assert overlaps(s) == (False, True, False)


def test_the_resolved_defaults_are_written_into_scenario_yaml():
    doc = scenario_document(gpt("megatron"))
    assert {k: doc["parallel"][k] for k in KEYS} == {
        "overlap_tensor_backward": True,
        "overlap_gradient_reduce": False,
        "overlap_tensor_forward": False,
    }
    written = yaml.safe_load(scenario_yaml(gpt("megatron"), "test.yaml"))
    assert written["parallel"]["overlap_tensor_backward"] is True


def test_megatron_with_nothing_else_times_as_the_knob_did():
    # Korthikanti et al.'s runs used to set overlap_tensor_backward by hand
    by_hand = build_workload(
        resolve(gpt(overlap_tensor_backward=True, overlap_gradient_reduce=False))
    )
    framework = build_workload(resolve(gpt("megatron")))
    assert [u.backward_s for u in by_hand.units] == [u.backward_s for u in framework.units]
    assert [u.tp_backward for u in by_hand.units] == [u.tp_backward for u in framework.units]


def test_forward_overlap_costs_the_collectives_sm_share_only():
    # --tp-comm-overlap: the forward's two all-reduces (no sequence parallelism) leave the
    # stream and cost dgx-a100's collective_sm_share 0.15 x their time alone
    plain = resolve(gpt("megatron"))
    over = resolve(gpt("megatron", overlap_tensor_forward=True))
    fwd = tensor_comms(plain, plain.model.hidden)[0]
    u_plain, u_over = build_workload(plain).units[0], build_workload(over).units[0]
    assert u_plain.tp_forward is not None and u_over.tp_forward is None
    assert u_over.forward_s - u_plain.forward_s == pytest.approx(0.15 * alone_s(plain, fwd))
    # with overlap_tensor_backward (Megatron's default) the backward's all run beside too
    assert u_over.tp_backward is None
