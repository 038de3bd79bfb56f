"""DeepSpeed ZeRO-3's gathered parameters in the step's memory timeline (state/zero3_prefetch.py,
docs/zero3-prefetch.md): the bytes live at named moments worked out by hand from the
coordinator's rules (deepspeed/runtime/zero/partitioned_param_coordinator.py, commit 00a31c99),
DeepSpeed's defaults, the persistence threshold, the reuse distance, and bad input."""

from __future__ import annotations

from conftest import scenario
from problem_lines import said
from test_memory_timeline import TINY

from tiersim.config.framework import offload_plan
from tiersim.state.inventory import build_inventory
from tiersim.state.resolved import resolve
from tiersim.state.step_memory import build_events

# test_memory_timeline's tiny model: hidden 64, 4 heads of 16 (no GQA), MLP 128 gated, 2
# layers, untied: each layer's q, k, v, o are 64 x 64 = 4,096 values, gate, up, down
# 64 x 128 = 8,192, two RMSNorms of 64; the embedding and the head 32,000 x 64 = 2,048,000;
# the final norm 64
BF16 = {"weights": "bf16", "gradients": "bf16", "master": "fp32", "optimizer": "fp32"}
EMB = HEAD = 32_000 * 64  # 2,048,000 values
GATHERED = "gathered weights"
PERSISTENT = "persistent parameters (ZeRO-3, at most stage3_param_persistence_threshold)"
# the window tests' settings: bucket 8,192, max_live 20,000, reuse distance 0, norms persistent
WINDOW = {
    "stage3_prefetch_bucket_size": 8192,
    "stage3_max_live_parameters": 20_000,
    "stage3_max_reuse_distance": 0,
    "stage3_param_persistence_threshold": 100,
}


def raw(deepspeed: dict | None = None, **training) -> dict:
    # transformers' Llama under DeepSpeed (the HF Trainer's): q, k, v, o, gate, up and down
    # seven modules, as the counts here take them (Megatron-DeepSpeed, implementation
    # megatron, holds query_key_value and dense_h_to_4h: tests/test_megatron_held.py)
    tr = {"seq_len": 32, "precision": BF16, "workspace": "0 B", "framework": "deepspeed"}
    tr["implementation"] = "huggingface"
    tr |= training
    if deepspeed is not None:
        tr["deepspeed"] = deepspeed
    return {"name": "z3", "model": TINY, "training": tr, "parallel": {"data": 2, "zero_stage": 3}}


def events(mapping: dict):
    r = resolve(scenario(mapping))
    return build_events(r, build_inventory(r), 0)


def gathered_by_moment(evs) -> dict[str, tuple[int, int]]:
    """Each moment's (most, last) bytes of gathered weights live, replaying the events."""
    live, out = 0, {}
    for e in evs:
        out.setdefault(e.moment, (live, live))  # what the moment starts with
        if e.part == GATHERED:
            live += e.nbytes if e.alloc else -e.nbytes
            out[e.moment] = (max(out[e.moment][0], live), live)
    return out


def test_defaults_are_deepspeeds():
    """DeepSpeedZeroConfig (zero/config.py, commit 1b88ac36): stage3_prefetch_bucket_size 5e7,
    stage3_max_live_parameters 1e9, stage3_max_reuse_distance 1e9,
    stage3_param_persistence_threshold 1e5."""
    plan = offload_plan(scenario(raw()))
    assert plan.prefetch_bucket_size == 50_000_000
    assert plan.max_live_parameters == 1_000_000_000
    assert plan.max_reuse_distance == 1_000_000_000
    assert plan.param_persistence_threshold == 100_000
    # the older training.offload spelling of the first two is read too
    plan = offload_plan(scenario(raw(offload={"prefetch_bucket_size": 1000})))
    assert plan.prefetch_bucket_size == 1000


def test_small_tensors_stay_gathered_all_step_at_the_default_threshold():
    """At 1e5 every tensor of a layer is persistent here (4,096 and 8,192 values, the norms 64:
    parameter_offload.py `param.ds_numel <= param_threshold`): 2 layers x (4 x 4,096 +
    3 x 8,192 + 2 x 64) + the final norm 64 = 2 x 41,088 + 64 = 82,240 values, bf16:
    164,480 B from the start of the step, never freed. The embedding and the head are not:
    the embedding's fetch (2,048,000 values) prefetches the head (2,048,000 < 5e7, and the
    round goes on to the queue's end, every other entry persistent or gathered), each kept
    to its last use as the prefetch already took its later uses (`__most_recent_step_id_
    param_fetched_for`): 4,096,000 values = 8,192,000 B from the embeddings to the loss's
    backward, the embedding's 4,096,000 B to its own backward."""
    evs = events(raw())
    persistent = [(e.moment, e.nbytes, e.alloc) for e in evs if e.part == PERSISTENT]
    assert persistent == [("start of the step", 2 * 82_240, True)]
    got = gathered_by_moment(evs)
    assert got["forward: embeddings"] == (2 * (EMB + HEAD), 2 * (EMB + HEAD))
    assert got["forward: layer 0"] == got["forward: layer 1"] == (8_192_000, 8_192_000)
    assert got["backward: loss"] == (8_192_000, 2 * EMB)
    assert got["backward: embeddings"] == (2 * EMB, 0)
    # a threshold of 0 makes nothing persistent: the layers' tensors are gathered too
    evs = events(raw({"stage3_param_persistence_threshold": 0}))
    assert not [e for e in evs if e.part == PERSISTENT]
    layers = 2 * (4 * 4_096 + 3 * 8_192 + 2 * 64) + 64  # the same 82,240 values
    assert gathered_by_moment(evs)["forward: embeddings"][0] == 2 * (EMB + HEAD + layers)


def test_the_prefetch_window_by_hand():
    """bucket 8,192, max_live 20,000, reuse distance 0, threshold 100 (the norms persistent).
    A layer's fetches: its 4 modules without parameters (decoder layer, attention, MLP,
    activation), then q, k, v, o, gate, up, down, the norms. Each fetch prefetches from the
    queue while fewer than min(20,000 - available, 8,192) values are taken this round.
    forward, layer 0 (nothing left from the embedding: 2,048,000 >= 20,000, no prefetch, and
    released): the containers take q+k (8,192), v+o (16,384), gate (24,576); from there each
    use is released after it and each round that finds room takes the next tensor whole:
    most 24,576, and at its end q, k, v, o, gate of layer 1 = 4 x 4,096 + 8,192 = 24,576.
    layer 1: up's round (room 20,000 - 16,384 = 3,616) passes the norms and the final norm
    and takes the head: 16,384 + 2,048,000 = 2,064,384; at its end the head alone.
    loss: the head released after its forward (reuse distance 0) and gathered again for its
    backward (2,048,000); the final norm's backward prefetches layer 1's down: 8,192 left.
    backward, layer 1: down, then up and gate (24,576); at its end layer 0's down and up,
    16,384. In bf16, 2 B a value."""
    got = gathered_by_moment(events(raw(WINDOW)))
    assert got["forward: embeddings"] == (2 * EMB, 0)
    assert got["forward: layer 0"] == (2 * 24_576, 2 * 24_576)
    assert got["forward: layer 1"] == (2 * 2_064_384, 2 * HEAD)
    assert got["forward: loss"] == (2 * HEAD, 0)
    assert got["backward: loss"] == (2 * HEAD, 2 * 8_192)
    assert got["backward: layer 1"] == (2 * 24_576, 2 * 16_384)


def test_a_parameter_used_again_within_the_reuse_distance_is_kept():
    """No prefetch (bucket 0), the norms persistent: the head's forward is followed at once by
    its backward (0 values between), within a reuse distance of 50,000: kept, not gathered
    again for the loss's backward. The embedding's next use is after the whole model (more
    than 50,000 values): released after its forward. At distance 0 the head is gathered
    twice."""
    kept = {"stage3_prefetch_bucket_size": 0, "stage3_max_reuse_distance": 50_000}
    kept["stage3_param_persistence_threshold"] = 100
    evs = events(raw(kept))
    assert gathered_by_moment(evs)["forward: embeddings"] == (2 * EMB, 0)
    assert gathered_by_moment(evs)["forward: loss"] == (2 * HEAD, 2 * HEAD)
    again = [e for e in evs if e.part == GATHERED and e.alloc and e.moment == "backward: loss"]
    assert again == []
    evs = events(raw({**kept, "stage3_max_reuse_distance": 0}))
    again = [e.nbytes for e in evs if e.part == GATHERED and e.alloc]
    assert gathered_by_moment(evs)["forward: loss"] == (2 * HEAD, 0)
    assert [e.nbytes for e in evs if e.part == GATHERED and e.moment == "backward: loss"] == [
        2 * HEAD,  # gathered again
        2 * HEAD,  # and released
    ]
    # without prefetch a layer holds its largest tensor at most: gate, up, down 8,192 values
    assert gathered_by_moment(evs)["forward: layer 0"] == (2 * 8_192, 0)
    assert max(again) == 2 * HEAD


def test_bad_deepspeed_keys_exit_2_naming_file_and_key(cli, write):
    bad = raw({"stage3_max_live_parameters": -5, "stage3_prefetch_bucket_size": "lots"})
    path = write(bad)
    code, out, err = cli("validate", path)
    assert code == 2 and out == "" and "Traceback" not in err
    found = sorted(said(line, path).coded for line in err.strip().splitlines())
    assert found == [
        ("E-RANGE", "training.deepspeed.stage3_max_live_parameters"),
        ("E-TYPE", "training.deepspeed.stage3_prefetch_bucket_size"),
    ]
    # the same setting under both its names, with two values
    both = raw({"stage3_max_live_parameters": 500_000_000})
    both["training"]["offload"] = {"max_live_parameters": 1_000_000_000}
    path = write(both, "both.yaml")
    code, out, err = cli("validate", path)
    assert code == 2 and "Traceback" not in err
    line = said(err.strip(), path)
    assert line.coded == ("E-CONFLICT", "training.deepspeed.stage3_max_live_parameters")
    assert "training.offload.max_live_parameters" in line.message


def test_keys_without_a_zero3_fetch_are_noted_not_read(cli, write):
    mapping = raw({"stage3_max_reuse_distance": 0})
    mapping["parallel"]["zero_stage"] = 2
    code, _, err = cli("inventory", write(mapping))
    assert code == 0
    assert "training.deepspeed.stage3_max_reuse_distance: 0 has no effect" in err
    assert "[W-NO-EFFECT]" in err


def test_the_values_kept_ahead_of_use_in_the_middle_layer_by_hand():
    """Layer 1's forward under the window test's settings: it starts with q, k, v, o, gate
    ahead (24,576); q's and k's fetches use two of them (16,384); v's uses v and prefetches up
    (20,480); o's uses o (16,384); gate's uses gate and prefetches down (16,384); up's takes
    the head (2,056,192); the fewest: 16,384 values."""
    from tiersim.state.zero3_prefetch import fetch_ahead_values

    assert fetch_ahead_values(resolve(scenario(raw(WINDOW)))) == 16_384


def test_the_engine_fetches_as_many_units_ahead_as_fit_in_that_window():
    """workload/fetch.py `fetch_depth` with DeepSpeed's window: the largest unit as many times
    as it fits, never beyond the configured depth. 16,384 // 8,320 = 1; the 1T model's
    attention matrix ahead (655,360,000 values) holds no 2,621,440,000-value MLP part: 0;
    5e9 holds one."""
    from types import SimpleNamespace

    from tiersim.workload.fetch import fetch_depth

    plan = offload_plan(scenario(raw(WINDOW)))
    units = [SimpleNamespace(params=n) for n in (8_192, 8_320)]
    assert fetch_depth(plan, units, 2, window=16_384) == 1
    big = [SimpleNamespace(params=n) for n in (655_360_000, 2_621_440_000)]
    assert fetch_depth(plan, big, 2, window=655_360_000) == 0
    assert fetch_depth(plan, big, 2, window=5_000_000_000) == 1
    assert fetch_depth(plan, units, 2, window=10**9) == 2  # the configured depth bounds it


def test_import_and_emit_carry_the_keys_under_deepspeeds_names():
    """`tiersim import` reads zero_optimization.stage3_max_reuse_distance (1e8 in the fixture,
    DeepSpeed's ZeRO-Infinity example) into training.deepspeed; `plan --emit deepspeed`
    writes the four back under the same names."""
    import json

    from conftest import FIXTURES

    from tiersim.frameworks.deepspeed import read_deepspeed
    from tiersim.frameworks.write_deepspeed import write_deepspeed

    cfg = json.loads((FIXTURES / "frameworks" / "ds_zero_stage_infinity_config.json").read_text())
    mapped = read_deepspeed(cfg, "ds.json")
    assert mapped.values["training.deepspeed.stage3_max_reuse_distance"] == 100_000_000
    emitted = json.loads(write_deepspeed(scenario(raw(WINDOW))).text)["zero_optimization"]
    assert {k: emitted[k] for k in WINDOW} == WINDOW


def test_full_recompute_fetches_a_layers_tensors_again_for_its_backward():
    """With activation checkpointing each layer's backward first runs its forward again (the
    checkpoint's module hooks fire again): without prefetch or reuse, layer 1's backward
    gathers its 7 matrices twice (14 tensors, the allocator's pieces), else once; at most its
    largest, 8,192 values, at a time."""
    plain = {**WINDOW, "stage3_prefetch_bucket_size": 0}
    for recompute, gathers in (("none", 7), ("full", 14)):
        evs = events(raw(plain, recompute=recompute))
        got = [e for e in evs if e.part == GATHERED and e.moment == "backward: layer 1" and e.alloc]
        assert [(e.nbytes, e.pieces) for e in got][:1] == [(2 * 8_192, gathers)]


def test_the_first_steps_without_a_trace_hold_no_more_than_the_steady_step():
    """The coordinator starts with no trace (`ZeRoTraceMode.INVALID`), records one in the second
    step (`reset_step`: INVALID -> RECORD -> COMPLETE) and only then prefetches
    (`fetch_sub_module`: "don't prefetch if we dont have a completed model trace") or keeps a
    parameter for reuse (`release_sub_module` releases every parameter of the module without
    one): the coordinator's rules with stage3_prefetch_bucket_size 0 and
    stage3_max_reuse_distance 0. By hand (norms persistent at 100): each layer moment holds one
    module at a time, the largest an MLP matrix, 8,192 values x 2 B = 16,384 B; the embeddings'
    2,048,000 x 2 B = 4,096,000 B. The steady step holds at least as much at every moment, so
    its peak is the one "will it fit" needs."""
    keep = {"stage3_param_persistence_threshold": 100}
    untraced = raw({**keep, "stage3_prefetch_bucket_size": 0, "stage3_max_reuse_distance": 0})
    first = gathered_by_moment(events(untraced))
    assert first["forward: layer 0"][0] == first["backward: layer 1"][0] == 16_384
    assert first["forward: embeddings"][0] == 4_096_000
    steady = gathered_by_moment(events(raw(keep)))
    assert all(steady[m][0] >= most for m, (most, _) in first.items())
    assert steady["forward: layer 0"][0] > 16_384  # the steady step prefetches and keeps
