"""DeepSpeed ZeRO-3's reuse of gathered weights in the engine's time and in the memory
timeline, by hand from its parameter coordinator (deepspeedai/DeepSpeed
deepspeed/runtime/zero/partitioned_param_coordinator.py, commit 00a31c99, the same at
641d86fa; docs/zero3-prefetch.md "Between micro-batches" and "From the forward to the
backward"):

- `release_sub_module` releases a module's parameters after it runs unless
  `__params_to_release` finds them used again while scanning `self.__submodule_order[step_id:]`
  for fewer than `max_reuse_dist_in_numel` values, or prefetched for a later use
  (`__most_recent_step_id_param_fetched_for[param] > step_id`);
- the scan is over the one forward+backward's trace: what the backward uses last has no later
  use there and is released; `reset_step` (called by the root module's forward pre-hook,
  parameter_offload.py at 042b847a `_start_of_forward_hook`) starts the next forward with an
  empty count and the queue from the start, so that forward gathers those weights again,
  whatever `stage3_max_reuse_distance` says;
- between a layer's forward and its backward, a tensor the scan reaches is kept: the backward
  gathers it no more."""

from __future__ import annotations

import pytest
from conftest import scenario
from engine_helpers import merge, tiny
from engine_helpers import scenario as engine_scenario
from test_zero3_prefetch import GATHERED, raw

from tiersim.engine.schedule import build_schedule
from tiersim.engine.simulate import prepare, simulate
from tiersim.state.inventory import build_inventory
from tiersim.state.resolved import resolve
from tiersim.state.step_memory import build_events
from tiersim.workload.comms import alone_s
from tiersim.workload.work import build_workload

SENT = 4e9 * 7 / 8  # one all-gather or reduce-scatter of a 4 GB layer over 8 ranks: 3.5 GB


def two_layers(distance: int | None):
    """2 layers of 1e9 fp32 parameters (4 GB a layer), no embeddings or head, DeepSpeed
    ZeRO-3 over data 8 on NVLink, 2 micro-batches."""
    par = {"data": 8, "zero_stage": 3}
    training = {"framework": "deepspeed", "grad_accumulation": 2}
    if distance is not None:
        training["deepspeed"] = {"stage3_max_reuse_distance": distance}
    model = {"parameters": 2_000_000_000, "layers": 2}
    return engine_scenario(tiny(model=model, parallel=par, training=training))


def collectives(s) -> dict[str, list[float]]:
    """The bytes of each collective the step's schedule issues, by name."""
    r = resolve(s)
    setup = prepare(r, build_inventory(r))
    out: dict[str, list[float]] = {}
    for op in build_schedule(r, setup.wl, 1, setup.depth).ops:
        if op.resource is not None:
            out.setdefault(op.label, []).append(op.nbytes)
    return out


@pytest.mark.parametrize("distance, gathers", [(None, 6), (0, 8)])
def test_each_micro_batch_gathers_the_first_layer_again(distance, gathers):
    # micro-batch k: layer 0's forward gathers (its backward, the trace's last use, released
    # it: at micro-batch 1 too, where tiersim had held it), layer 1's forward gathers. Layer 1
    # is kept to its backward at DeepSpeed's default distance (1e9: the scan after layer 1's
    # forward meets its backward first, only parameterless modules between); layer 0 is not
    # (the scan passes layer 1's 1e9 values and stops, `params_traversed >= 1e9`): its
    # backward gathers. 3 a micro-batch = 6 (before: 7, layer 0 held into micro-batch 1 and
    # layer 1 gathered again by its backward). At distance 0 the scan stops at once: nothing
    # kept, 4 a micro-batch = 8. Each layer's gradients reduce-scattered every micro-batch:
    # 4. Each 3.5 GB.
    s = two_layers(distance)
    sent = collectives(s)
    assert sent["dp weights"] == [pytest.approx(SENT)] * gathers
    assert sent["dp gradients"] == [pytest.approx(SENT)] * 4
    assert simulate(s).links["nvlink"].bytes == pytest.approx((gathers + 4) * SENT)


# test_zero3_prefetch's tiny transformer, bf16 (2 B a value), data 2: an all-gather sends half
# a tensor's bytes, one value's worth (1 B a value). A layer: q, k, v, o 4,096 values each,
# gate, up, down 8,192, two norms 64 = 41,088; the rest: embedding and head 2,048,000 each and
# the final norm 64 = 4,096,064. The engine's fetch units (workload/fetch.py): each matrix,
# the norms joined to the down projection before them (8,320). No prefetch and no persistent
# parameters here, so the reuse distance alone decides.
LAYER, REST = 41_088, 4_096_064
FORWARD = 2 * LAYER + REST  # every forward gather: 4,178,240 B
FULL = FORWARD * 2  # the whole model's values in bf16: 8,356,480 B


def weights_sent(distance: int) -> float:
    keys = {
        "stage3_prefetch_bucket_size": 0,
        "stage3_param_persistence_threshold": 0,
        "stage3_max_reuse_distance": distance,
    }
    return sum(collectives(scenario(raw(keys)))["dp weights"])


def test_a_model_under_the_reuse_distance_gathers_nothing_for_its_backward():
    # 1e9 > the whole trace: every layer tensor kept from its forward to its backward; the
    # rest's forward use runs just before its backward (held, as before)
    assert weights_sent(1_000_000_000) == FORWARD


def test_at_distance_zero_every_backward_gathers_its_layer_again():
    assert weights_sent(0) == FORWARD + 2 * LAYER


def test_a_fetch_unit_partly_kept_gathers_the_rest_for_its_backward():
    # distance 4,096,300. Layer 1's second norm (the last tensor of its forward): the scan
    # passes the final norm (64), the head forward and backward (2 x 2,048,000) and the final
    # norm again (64) = 4,096,128 < 4,096,300, then meets it: kept. Its first norm: 64 more,
    # 4,096,256: kept. The down projection: 64 more, 4,096,384 >= 4,096,300: stopped, not
    # kept; every earlier tensor and all of layer 0 further still. So layer 1's last fetch
    # unit (down + the norms, 8,320 values) is gathered again for 8,192 of them: 128 B less
    # than at distance 0
    assert weights_sent(4_096_300) == FORWARD + 2 * LAYER - 128


def test_a_partly_kept_units_forward_writes_the_rest_of_its_hpz_secondary():
    # the case above under ZeRO++ hpZ (h = 2 of data 4) with the weights in host memory
    # (offload_param cpu), 2 micro-batches: a forward's release partitions (and copies into
    # the host's secondary: partition_parameters.py _partition_param_sec) only the tensors
    # the coordinator releases. Layer 1's two kept norms, 64 values each: padded to a
    # multiple of 4, // 2 = 32 values, 64 B of bf16 each; each micro-batch's forward copies
    # 128 B less than at distance 0, where nothing is kept (their backward copies them)
    def written(distance: int) -> int:
        keys = {
            "stage3_prefetch_bucket_size": 0,
            "stage3_param_persistence_threshold": 0,
            "stage3_max_reuse_distance": distance,
            "zero_hpz_partition_size": 2,
        }
        offloaded = {"parallel": {"data": 4}, "placement": {"weights": "dram"}}
        s = scenario(merge(raw(keys, grad_accumulation=2), offloaded))
        return simulate(s).links["pcie"].bytes_by_direction["hbm->dram"]

    assert written(0) - written(4_096_300) == 2 * 2 * (64 // 2) * 2 == 256


def test_the_timeline_holds_no_gathered_weights_across_the_micro_batch_boundary():
    # the walk of one micro-batch starts empty (`reset_step`: n_available 0, the queue from
    # the start): its first gathered bytes are the embeddings' fetch, which at the default
    # bucket (5e7) prefetches the whole model, 2 x 41,088 + 4,096,064 values = 8,356,480 B in
    # bf16; and the backward's last releases leave nothing gathered at its end (the
    # optimizer's step, or the next micro-batch's forward, finds none), at the default
    # distance (every tensor kept to its backward) as at 0 (persistent parameters: none at
    # threshold 0)
    for distance in (1_000_000_000, 0):
        keys = {"stage3_param_persistence_threshold": 0, "stage3_max_reuse_distance": distance}
        r = resolve(scenario(raw(keys, grad_accumulation=2)))
        evs = [e for e in build_events(r, build_inventory(r), 0) if e.part == GATHERED]
        assert (evs[0].moment, evs[0].alloc, evs[0].nbytes) == ("forward: embeddings", True, FULL)
        assert sum(e.nbytes if e.alloc else -e.nbytes for e in evs) == 0
        assert evs[-1].moment == "backward: embeddings"


def test_a_kept_layer_loses_its_backward_gathers_sm_share():
    # gpu.collective_sm_share 0.1: each hidden all-gather slows the pass beside it by 0.1 x its
    # time alone (workload/fsdp_exposure.py). Layer 1, kept at the default distance, has no
    # backward all-gather: its backward is 0.1 x one 3.5 GB gather alone shorter than at
    # distance 0 (3.5e9 B / 450 GB/s of NVLink + the ring's latency); layer 0's the same
    def backward_s(distance):
        s = two_layers(distance)
        gpu = s.hardware.gpu.model_copy(update={"collective_sm_share": 0.1})
        r = resolve(s.model_copy(update={"hardware": s.hardware.model_copy(update={"gpu": gpu})}))
        units = build_workload(r).units
        return r, units[0].backward_s, units[1].backward_s

    r, kept0, kept1 = backward_s(None)
    _, both0, both1 = backward_s(0)
    gather = build_workload(r).units[1].dp_weights
    assert gather.nbytes == pytest.approx(SENT)
    assert both1 - kept1 == pytest.approx(0.1 * alone_s(r, gather), rel=1e-12)
    assert 0.1 * alone_s(r, gather) > 0.1 * SENT / 450e9  # (the latency on top)
    assert kept0 == both0


def test_persistent_parameters_are_gathered_by_the_steps_first_forward_only():
    # stage3_param_persistence_threshold 100: the norms (64 values: two a layer, the final
    # one) are persistent (parameter_offload.py `mark_persistent_parameters`), never released
    # by a use (`ds_persist`), partitioned again only by `step`'s `_partition_all_parameters`:
    # micro-batch 0's forward gathers them, micro-batch 1's does not (the memory timeline holds
    # them all step). Distance 0, no prefetch: nothing else kept. Sent, 1 B a value (bf16,
    # data 2):
    #   micro-batch 0: forward 2 x 41,088 + 4,096,064 = 4,178,240; backward the layers but
    #                  their persistent norms, 2 x (41,088 - 128) = 81,920: 4,260,160
    #   micro-batch 1: the same but the forward's norms, 2 x 128 + 64 = 320: 4,259,840
    # 8,520,000 B of weight gathers (each micro-batch's gathered them all: 8,520,320); the
    # gradients' reduce-scatters 2 x 4,178,240 = 8,356,480; NVLink 16,876,480 B.
    keys = {
        "stage3_prefetch_bucket_size": 0,
        "stage3_param_persistence_threshold": 100,
        "stage3_max_reuse_distance": 0,
    }
    s = scenario(raw(keys, grad_accumulation=2))
    sent = collectives(s)
    assert sum(sent["dp weights"]) == 4_260_160 + 4_259_840 == 8_520_000
    # a layer's last fetch unit (down + the two norms, 8,320) gathered whole by micro-batch
    # 0's forwards only (8,192 of it by micro-batch 1's and by every backward); the rest
    # (embedding, final norm, head, 4,096,064) by micro-batch 1's forward without the norm
    assert sent["dp weights"].count(8_320) == 2
    assert sent["dp weights"].count(4_096_064) == 1 and sent["dp weights"].count(4_096_000) == 1
    assert sum(sent["dp gradients"]) == 2 * FORWARD == 8_356_480
    assert simulate(s).links["nvlink"].bytes == 8_520_000 + 8_356_480 == 16_876_480
