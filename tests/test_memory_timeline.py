"""The GPU's memory timeline of the step: each transient a named part with its arithmetic
written out here, the peak's moment, the allocator's view, and `fits` decided on it."""

from __future__ import annotations

import math

import pytest
from conftest import scenario

from tiersim.report.json_report import inventory_report
from tiersim.state.allocator import CachingAllocator, round_size, segment_size
from tiersim.state.inventory import build_inventory
from tiersim.state.resolved import resolve
from tiersim.state.step_memory import CUDA_CONTEXT_BYTES, build_events, gpu_timeline
from tiersim.state.step_optimizer import optimizer_temporaries
from tiersim.state.timeline import Event, evaluate, fit_pieces

MiB = 2**20

# a tiny Llama-style model with a large vocabulary: the loss's tensors dominate
TINY = {
    "hidden": 64,
    "layers": 2,
    "heads": 4,
    "ffn_hidden": 128,
    "vocab": 32000,
    "norm": "rmsnorm",
    "position": "rope",
    "gated_mlp": True,
    "tied_embeddings": False,
}
FP32 = {"weights": "fp32", "gradients": "fp32", "master": "none", "optimizer": "fp32"}
BF16 = {"weights": "bf16", "gradients": "bf16", "master": "none", "optimizer": "bf16"}


def tiny(**training) -> dict:
    base = {"seq_len": 128, "precision": FP32, "workspace": "0 B"}
    return {"name": "tiny", "model": TINY, "training": {**base, **training}}


def timeline(raw: dict):
    r = resolve(scenario(raw))
    return r, build_inventory(r), gpu_timeline(r, build_inventory(r))


# --- the allocator's rules (c10/cuda/CUDACachingAllocator.cpp) ----------------------------------


def test_requests_round_to_512_bytes_and_open_segments_by_pool():
    assert round_size(1) == 512 and round_size(513) == 1024 and round_size(4096) == 4096
    assert segment_size(1 * MiB) == 2 * MiB  # small pool: a 2 MiB segment
    assert segment_size(1 * MiB + 512) == 20 * MiB  # large, under 10 MiB: a 20 MiB one
    assert segment_size(25 * MiB) == 26 * MiB  # else rounded up to 2 MiB


def test_freed_blocks_are_cached_reused_best_fit_and_split():
    a = CachingAllocator()
    a.malloc("x", 100)  # 512 B of a new 2 MiB small segment
    a.malloc("y", 3 * MiB)  # a new 20 MiB large segment, split (17 MiB left > 1 MiB)
    a.free("x")
    a.malloc("z", 200)  # reuses x's cached block: nothing new reserved
    assert a.allocated == 512 + 3 * MiB
    assert a.reserved == 2 * MiB + 20 * MiB
    a.free("y")  # merges back into one 20 MiB free block
    a.malloc("w", 19 * MiB)  # fits it; 1 MiB left is not > 1 MiB: no split, the block whole
    assert a.allocated == 512 + 20 * MiB and a.reserved == 22 * MiB


def test_under_pressure_wholly_free_segments_are_released_else_out_of_memory():
    a = CachingAllocator(limit=30 * MiB)
    assert a.malloc("a", 25 * MiB)  # a 26 MiB segment
    assert not a.malloc("b", 25 * MiB)  # 26 + 26 > 30 and nothing free to release
    a.free("a")
    assert a.malloc("c", 25 * MiB) and a.reserved == 26 * MiB


def test_a_part_of_known_tensors_is_requested_tensor_by_tensor():
    # a 30 MiB part of a 12 MiB and an 18 MiB tensor: as two equal 15 MiB requests each opens
    # a 16 MiB segment (rounded up to 2 MiB) whose 1 MiB rest is not split off (not > 1 MiB):
    # 32 MiB reserved; as its tensors, 12 and 18 MiB segments, nothing above the request
    equal, sized = CachingAllocator(), CachingAllocator()
    equal.malloc("part", 30 * MiB, pieces=2)
    sized.malloc("part", 30 * MiB, pieces=(12 * MiB, 18 * MiB))
    assert equal.reserved == 32 * MiB and sized.reserved == sized.allocated == 30 * MiB
    with pytest.raises(ValueError, match="do not make"):  # sizes must make the part
        sized.malloc("other", 30 * MiB, pieces=(12 * MiB, 17 * MiB))


def test_piece_sizes_are_fitted_to_the_whole_bytes_or_counted():
    # sizes of fractional bytes (a share divided over ranks) rounded, the largest made to sum
    # to the event's whole bytes; sizes far from it (more than a byte a piece): their count
    assert fit_pieces((10.4, 20.4), 31) == (10, 21)
    assert fit_pieces((10.0, 20.0), 30) == (10, 20)
    assert fit_pieces((10.0, 20.0), 40) == 2
    assert fit_pieces(0, 5) == 1 and fit_pieces(3, 5) == 3


def test_a_part_of_many_tensors_reuses_what_one_block_would_not():
    # two layers' 8 MiB of saved tensors as 8 x 1 MiB blocks (small pool) free, then a
    # 16 x 1 MiB list reuses them; as one 16 MiB request it would need a segment of its own
    a = CachingAllocator()
    a.malloc("saved", 16 * MiB, pieces=16)
    a.free("saved")
    before = a.reserved
    a.malloc("temp", 16 * MiB, pieces=16)
    assert a.reserved == before


# --- the timeline's arithmetic ------------------------------------------------------------------


def test_peak_and_its_parts_of_a_hand_made_timeline():
    events = [
        Event("start", "start", "w", "weights", 100, True),
        Event("fwd", "forward", "a", "saved", 50, True),
        Event("bwd", "backward", "g", "grad", 30, True),
        Event("bwd", "backward", "a", "saved", 50, False),
        Event("bwd", "backward", "g", "grad", 30, False),
    ]
    t = evaluate("hbm", 10**8, events, [])
    assert t.allocated == (100, 150, 180, 130, 100)
    assert t.peak_index == 2 and t.peak_event.moment == "bwd"
    assert t.peak_parts == {"weights": 100, "saved": 50, "grad": 30}
    # three small-pool requests: one 2 MiB segment holds all of them
    assert t.peak_reserved_bytes == 2 * MiB and t.fits


def test_huggingface_loss_backward_holds_three_fp32_vocabulary_tensors():
    """transformers' loss: F.cross_entropy(logits.float()) keeps the fp32 log-softmax
    (s·V·4); in backward nll_loss_backward's gradient (s·V·4) and log_softmax_backward's
    (s·V·4) are live beside it: s = 128, V = 32000 -> 4,096,000 values, 16,384,000 B each."""
    _r, inv, t = timeline(tiny(implementation="huggingface"))
    values = 128 * 32000
    assert t.peak_event.moment == "backward: loss"
    assert t.peak_parts["loss gradient (fp32)"] == 2 * 4 * values  # 32,768,000 B
    # the saved activations at the peak are the inventory's activation class exactly (the
    # log-softmax among them), one micro-batch; beside them the resident state: fp32 weights,
    # gradients and AdamW's two moments, 4 + 4 + 8 = 16 B per parameter
    assert t.peak_parts["saved activations"] == inv.per_gpu["activations"]
    assert t.peak_parts["resident weights"] == 4 * inv.parameters
    assert t.peak_parts["resident optimizer"] == 8 * inv.parameters
    assert t.peak_allocated_bytes == 16 * inv.parameters + inv.per_gpu["activations"] + 8 * values


def test_bf16_loss_copies_logits_to_fp32_and_casts_the_gradient_back():
    """bf16 compute: logits s·V·2 and their fp32 copy s·V·4 in forward; in backward the cast's
    gradient s·V·2 is allocated while log_softmax_backward's fp32 one is live; then the head's
    matmul backward makes its weight gradient V·h·2 (untied: freed by AccumulateGrad)."""
    r, inv, _t = timeline(tiny(implementation="huggingface", precision=BF16))
    values = 128 * 32000
    events = build_events(r, inv, 0)
    fwd = [e for e in events if e.moment == "forward: loss" and e.alloc]
    assert [(e.part, e.nbytes) for e in fwd] == [
        ("logits", 2 * values),
        ("logits in fp32 (the loss's copy)", 4 * values),
        ("saved activations", 4 * values),  # the log-softmax, kept
    ]
    bwd = [(e.part, e.nbytes) for e in events if e.moment == "backward: loss" and e.alloc]
    assert bwd == [
        ("loss gradient (fp32)", 4 * values),
        ("loss gradient (fp32)", 4 * values),
        ("loss gradient (compute precision)", 2 * values),
        ("head's weight gradient", 32000 * 64 * 2),  # V x h in bf16: 4,096,000 B
    ]


def test_megatron_keeps_the_fp32_softmax_and_works_in_place():
    """vocab_parallel_cross_entropy(logits.float()): the fp32 copy s·V/t·4 becomes the softmax
    and is kept until backward, whose gradient is computed in it; t = 2 halves the vocabulary."""
    raw = tiny(precision=BF16)
    raw["parallel"] = {"tensor": 2}
    r, inv, _t = timeline(raw)
    values = 128 * 32000 // 2
    parts = [(e.part, e.nbytes, e.alloc) for e in build_events(r, inv, 0) if "loss" in e.moment]
    assert parts == [
        ("logits", 2 * values, True),
        ("logits in fp32 (kept by the loss)", 4 * values, True),
        ("logits", 2 * values, False),
        ("loss gradient (compute precision)", 2 * values, True),
        ("logits in fp32 (kept by the loss)", 4 * values, False),
        ("loss gradient (compute precision)", 2 * values, False),
    ]


def test_full_recompute_holds_one_layers_whole_set_in_its_backward():
    r, inv, _t = timeline(tiny(recompute="full", implementation="huggingface"))
    m = r.model
    none = m.layer_activation_bytes(128, 1, 1, False, "none", r.accounting)
    kept = m.layer_activation_bytes(128, 1, 1, False, "full", r.accounting)
    # the layer's input, the checkpoint's: s·h·4 = 128 x 64 x 4 B in fp32
    assert kept == 32_768
    events = build_events(r, inv, 0)
    rec = [e for e in events if e.part == "recompute working set" and e.alloc]
    # one per layer, each the layer's whole saved set with recompute none but the input it
    # kept, already there (measured on the CPU: tests/test_step_measure.py, test_fsdp2_step.py)
    assert [e.nbytes for e in rec] == [math.ceil(none - kept)] * 2
    assert [e.moment for e in rec] == ["backward: layer 1", "backward: layer 0"]


def test_layer_backward_transients_are_the_flowing_gradient_and_two_mlp_gradients():
    r, inv, _ = timeline(tiny())
    # fp32: s·h·4 = 128·64·4 = 32,768 and 2·s·f·4 = 2·128·128·4 = 131,072
    work = [e.nbytes for e in build_events(r, inv, 0) if e.part == "backward transients"]
    assert set(work) == {32_768 + 131_072}


def test_deepspeed_zero1_builds_the_fp32_gradient_partition_at_the_step():
    """stage_1_and_2.py step(): single_grad_partition in fp32 before the 16-bit gradients are
    freed: Llama-2-7B (6,738,415,616 parameters) over 8 GPUs -> 842,301,952 x 4 B
    = 3,369,207,808 B (3.4 GB)."""
    raw = {
        "name": "ds",
        "model": {"preset": "llama-2-7b"},
        "training": {"framework": "deepspeed", "seq_len": 512},
        "parallel": {"data": 8, "zero_stage": 1},
    }
    r = resolve(scenario(raw))
    what, nbytes = optimizer_temporaries(r, 0)
    assert what == "fp32 gradient partition (DeepSpeed ZeRO-1/2)"
    assert nbytes == math.ceil(6_738_415_616 / 8) * 4 == 3_369_207_808
    t = gpu_timeline(r, build_inventory(r))
    opt = [e for e in t.events if e.phase == "optimizer" and e.alloc]
    assert opt[0].nbytes == 3_369_207_808


def test_deepspeed_zero3_takes_one_sub_group_at_a_time():
    """stage3.py: one sub-group (sub_group_size 1e9 by default) of fp32 gradients at a time;
    Llama-2-7B over 2 GPUs holds 3,369,207,808 parameters: 1e9 x 4 = 4 GB."""
    raw = {
        "name": "ds3",
        "model": {"preset": "llama-2-7b"},
        "training": {"framework": "deepspeed", "seq_len": 512},
        "parallel": {"data": 2, "zero_stage": 3},
    }
    assert optimizer_temporaries(resolve(scenario(raw)), 0)[1] == 4 * 10**9


def test_torch_adamw_foreach_holds_one_state_sized_list():
    """_multi_tensor_adamw: torch._foreach_sqrt(exp_avg_sqs) is one new tensor per
    parameter: P x 4 B in fp32 on CUDA (CPU's single-tensor path: two of the largest)."""
    r, inv, _ = timeline(tiny())
    assert optimizer_temporaries(r, 0) == ("optimizer step temporaries", 4 * inv.parameters)


def test_fsdp2_gathers_layers_and_reduce_scatters_whole_layer_gradients():
    raw = tiny(framework="fsdp", precision={**FP32, "compute": "bf16"})
    raw["parallel"] = {"data": 4, "zero_stage": 3}
    r, inv, _t = timeline(raw)
    # one layer: q, k, v, o 4 x 64 x 64, gate/up/down 3 x 64 x 128, 2 norms of 64
    layer = 4 * 64 * 64 + 3 * 64 * 128 + 2 * 64  # 41,088 values
    events = build_events(r, inv, 0)
    gathered = {e.key: e.nbytes for e in events if e.part == "gathered weights" and e.alloc}
    assert gathered["gathered 0"] == gathered["gathered 1"] == 2 * layer  # bf16 copies
    # autograd makes a layer's gradients in bf16 one tensor at a time: the first (the largest,
    # the MLP's down projection 64 x 128 = 8,192 values) beside all the layer saved, the rest
    # (41,088 - 8,192 = 32,896 values) as the saved tensors go; reduce-scattered a layer at once
    grads = [e.nbytes for e in events if e.part.startswith("unsharded") and e.alloc]
    assert grads == [2 * 8_192, 2 * 32_896] * 2
    rs = [(e.part, e.nbytes) for e in events if e.part.startswith("reduce-scatter") and e.alloc]
    # reduced in training.precision.gradients, fp32 (FSDP2's reduce_dtype; chunk_cat casts the
    # bf16 gradients in): input the layer's 41,088 values x 4 B = 164,352 B; output a quarter,
    # 41,088 B, already the parameters' fp32 (no cast back); then the root group's: embedding
    # and head 2 x 32,000 x 64 + final norm 64 = 4,096,064 values, x 4 and x 4 / 4
    rs_in, rs_out = "reduce-scatter input (FSDP2)", "reduce-scatter output (FSDP2)"
    layers = [(rs_in, 164_352), (rs_out, 41_088)] * 2
    assert rs == [*layers, (rs_in, 16_384_256), (rs_out, 4_096_064)]


def test_outside_the_allocator_cuda_context_and_nccl_buffers():
    raw = tiny()
    raw["parallel"] = {"data": 2}
    _, _, t = timeline(raw)
    outside = {o.name: o.nbytes for o in t.outside}
    # 723 MiB context; one communicator x 16 ring channels, each on this GPU a send side
    # (ncclSendMem's 4,096 B + SIMPLE's 4 MiB, aligned to CUDA_IPC_MIN 2 MiB: 6 MiB) and a
    # receive side (ncclRecvMem's 4,096 B + LL's 524,288 B + LL128's 4,915,200 B = 5,443,584 B,
    # aligned: 6 MiB), NCCL's p2p.cc and init.cc: 16 x 12 MiB = 192 MiB
    assert 4_096 + 524_288 + 4_915_200 == 5_443_584 <= 6 * MiB < 4_096 + 4 * MiB + 2 * MiB
    assert outside == {"CUDA context": CUDA_CONTEXT_BYTES, "NCCL buffers": 192 * MiB}
    assert t.peak_total_bytes == t.peak_reserved_bytes + 723 * MiB + 192 * MiB


@pytest.mark.parametrize(
    ("par", "comms"),
    [
        ({"data": 2}, 1),
        ({"data": 2, "tensor": 2}, 2),
        # context parallelism: the gradients over data x context, K/V within context
        ({"data": 2, "context": 2}, 2),
        ({"context": 2}, 2),
    ],
)
def test_nccl_communicators_by_parallel_group(par, comms):
    """One communicator per group of more than one rank a GPU joins; under context
    parallelism Megatron-Core reduces gradients over data x context ranks
    (`get_data_parallel_group(with_context_parallel=True)`) and passes K/V within the context
    group: two, each 16 ring channels x 12 MiB."""
    raw = tiny()
    raw["parallel"] = par
    _, _, t = timeline(raw)
    nccl = {o.name: o.nbytes for o in t.outside}["NCCL buffers"]
    assert nccl == comms * 16 * 12 * MiB


def test_a_step_that_would_run_out_in_backward_does_not_fit_and_says_when():
    """The resident state fits, the loss's backward does not: fits false, at the loss."""
    raw = tiny(implementation="huggingface")
    _r, _inv, t = timeline(raw)
    # room for the context and what the allocator reserves up to the loss's backward, and
    # 8 MiB more: not for log_softmax_backward's s·V·4 = 16,384,000 B beside the saved one
    before = max(b for b, e in zip(t.reserved, t.events, strict=True) if e.phase == "forward")
    capacity = CUDA_CONTEXT_BYTES + before + 8 * MiB
    raw["hardware"] = {"tiers": {"hbm": {"capacity": f"{capacity} B"}}}
    s = scenario(raw)
    report = inventory_report(s, build_inventory(resolve(s)))
    mt = report["memory_timeline"]
    assert report["tiers"]["hbm"]["resident_bytes"] < capacity
    assert not mt["fits"] and not report["fits"] and not report["tiers"]["hbm"]["fits"]
    assert mt["out_of_memory_at"] == "backward: loss"
    assert mt["out_of_memory_allocating"] == "loss gradient (fp32)"


def test_run_plot_draws_the_memory_timeline_panel(tmp_path):
    """`run --plot`'s memory panel, found by its title: allocated and reserved after each
    event, the capacity less the context, the peak's moment in the title."""
    from matplotlib.figure import Figure

    from tiersim.report.plot_memory import TITLE, draw_memory_timeline

    # the tiny model reserves ~114 MiB at its peak: 512 MiB of room beside the 723 MiB context
    # is within 10 x of it, so the capacity is drawn as its dashed line
    raw = tiny(implementation="huggingface")
    raw["hardware"] = {"tiers": {"hbm": {"capacity": f"{CUDA_CONTEXT_BYTES + 512 * MiB} B"}}}
    _, _, t = timeline(raw)
    fig = Figure()
    draw_memory_timeline(fig.add_subplot(), t)
    (panel,) = [a for a in fig.axes if a.get_title().startswith(TITLE)]
    assert "at backward: loss" in panel.get_title()
    allocated, reserved, limit, peak = panel.get_lines()[:4]
    assert list(allocated.get_ydata()) == [b / 1e9 for b in t.allocated]
    assert list(reserved.get_ydata()) == [b / 1e9 for b in t.reserved]
    assert limit.get_linestyle() == "--"
    assert limit.get_ydata()[0] == 512 * MiB / 1e9  # 536,870,912 B: the capacity less context
    assert peak.get_xdata()[0] == t.peak_index
    assert not any("off scale" in x.get_text() for x in panel.texts)


def test_a_capacity_far_above_the_peak_is_a_note_not_a_line():
    """The default HBM, CUDA's 139.80 GiB (143,155 MiB = 150,108,897,280 B), less the 723 MiB
    context (758,120,448 B) leaves 149,350,776,832 B = 149.35 GB of room, over 1000 x the tiny
    model's ~114 MiB: drawn, it would flatten the curves to the axis (ren2021-cpu-adam-1b:
    2.23 GB under a 31 GB line), so it is a note."""
    from matplotlib.figure import Figure

    from tiersim.report.plot_memory import draw_memory_timeline

    _, _, t = timeline(tiny(implementation="huggingface"))
    ax = Figure().add_subplot()
    draw_memory_timeline(ax, t)
    assert not [line for line in ax.lines if line.get_linestyle() == "--"]
    notes = [x.get_text() for x in ax.texts]
    # named by what it takes off (context, NCCL and, under tp_comm_overlap, TE userbuffers)
    label = "capacity less memory outside the allocator 149.35 GB off scale"
    assert any(n.startswith(label) for n in notes)
    # the curves fill the panel: the reserved peak at least half the axis's height
    assert ax.get_ylim()[1] < 2 * t.peak_reserved_bytes / 1e9


# --- mixture of experts per rank ----------------------------------------------------------------

TINY_MOE = {
    **TINY,
    "vocab": 256,
    "experts": 4,
    "experts_per_token": 2,
    "expert_ffn_hidden": 128,
}


def test_the_busiest_expert_rank_keeps_its_extra_routed_rows():
    """expert_imbalance 1.5 over 2 expert ranks: the busiest receives 1.5 x the mean of the
    k·T routed rows. megatron (bf16, gated): k·T = 2 x 128 = 256 rows of 2h + 6f + 2h bytes
    (16-bit) = 256 x (128 + 768 + 128) = 262,144 B; 0.5 x that beyond the mean per layer."""
    raw = tiny(precision=BF16)
    raw["model"] = TINY_MOE
    raw["parallel"] = {"data": 2, "expert": 2, "expert_imbalance": 1.5}
    r, inv, _ = timeline(raw)
    extra = [e for e in build_events(r, inv, 0) if e.part.startswith("saved activations: the")]
    assert [e.nbytes for e in extra if e.alloc] == [131_072, 131_072]  # one per MoE layer
    raw["parallel"]["expert_imbalance"] = 1.0  # uniform: nothing beyond the mean
    r, inv, _ = timeline(raw)
    assert not [e for e in build_events(r, inv, 0) if e.part.startswith("saved activations: the")]


def test_transformers_fused_experts_are_gathered_whole_under_zero3():
    """transformers 5 fuses a layer's experts into one module, which DeepSpeed's submodule
    fetch gathers whole even beyond max_live_parameters (a module's own fetch is not bounded:
    partitioned_param_coordinator.py `fetch_sub_module`): 4 experts x 3 x 64 x 128 = 98,304
    values in bf16 = 196,608 B, where max_live_parameters allows 50,000 values. Without
    prefetch (bucket 0), reuse (distance 0) or persistence (threshold 0), a layer's forward
    holds its largest module alone (state/zero3_prefetch.py)."""
    raw = tiny(implementation="huggingface", framework="deepspeed", precision=BF16)
    raw["model"] = TINY_MOE
    raw["training"]["offload"] = {"max_live_parameters": 50_000}
    raw["training"]["deepspeed"] = {
        "stage3_prefetch_bucket_size": 0,
        "stage3_max_reuse_distance": 0,
        "stage3_param_persistence_threshold": 0,
    }
    raw["parallel"] = {"data": 2, "zero_stage": 3}
    r, inv, _ = timeline(raw)
    gathered = {e.key: e.nbytes for e in build_events(r, inv, 0) if e.part == "gathered weights"}
    assert gathered["zero3 forward: layer 0"] == 2 * 4 * 3 * 64 * 128
    # Megatron-DeepSpeed: the experts apart, each a copy of ParallelMLP whose dense_h_to_4h
    # holds gate and up as one [2f, h] = [2 x 128, 64] (16,384 values; moeheld), the layer's
    # largest module: above its query_key_value, [q + 2kv, h] = [64 + 2 x 64, 64] = 12,288
    raw["training"]["implementation"] = "megatron"
    r, inv, _ = timeline(raw)
    gathered = {e.key: e.nbytes for e in build_events(r, inv, 0) if e.part == "gathered weights"}
    assert gathered["zero3 forward: layer 0"] == 2 * (2 * 128) * 64 == 32_768


# --- FP8 weight copies (training.fp8) -----------------------------------------------------------


def without_kernel_table(raw: dict) -> dict:
    """The default machine without its GPU's kernel table: every FP8 recipe is then taken (the
    table measures no mxfp8 GEMM on an H200, and memory does not depend on the rate)."""
    return {**raw, "hardware": {"gpu": {"kernels": None}}}


@pytest.mark.parametrize(
    ("recipe", "per_layer"),
    [
        # a layer's linear weights: q, k, v, o 64 x 64 (4,096 values) and gate, up, down
        # 64 x 128 (8,192); each kept twice (row-wise, and transposed for backward) at 1 B a
        # value with its scales; embeddings, head and norms stay out
        # tensorwise: one fp32 scale a copy: 4 x 2 x (4,096 + 4) + 3 x 2 x (8,192 + 4)
        ("tensorwise", 4 * 2 * 4_100 + 3 * 2 * 8_196),
        # delayed: TE's weight1_fp8 and weight1_t_fp8, each with an fp32 scale_inv (as
        # tensorwise), and the GEMM's FP8 metadata: 3 forward + 2 backward tensors, each 1024
        # fp32 amax-history rows, a scale and a scale_inv (TE module/base.py at 0004dbd0,
        # set_fp8_weights, set_meta_tensor): 5 x (1,024 + 2) x 4 = 20,520 B
        ("delayed", 4 * (2 * 4_100 + 20_520) + 3 * (2 * 8_196 + 20_520)),
        # rowwise: an fp32 scale a row: 64 x 64 both ways 4,096 + 256; 64 x 128 has 64 rows
        # (8,192 + 256) and transposed 128 (8,192 + 512)
        ("rowwise", 4 * 2 * 4_352 + 3 * (8_448 + 8_704)),
        # mxfp8: a 1-byte scale per 32 values of each copy: 4,096 / 32 = 128, 8,192 / 32 = 256
        ("mxfp8", 4 * 2 * 4_224 + 3 * 2 * 8_448),
    ],
)
def test_fp8_weight_copies_by_recipe(recipe, per_layer):
    r, inv, t = timeline(without_kernel_table(tiny(precision=BF16, fp8={"recipe": recipe})))
    fp8 = [e for e in build_events(r, inv, 0) if e.part == "FP8 weight copies (training.fp8)"]
    assert [(e.moment, e.nbytes) for e in fp8] == [("start of the step", 2 * per_layer)]
    assert t.peak_parts["FP8 weight copies (training.fp8)"] == 2 * per_layer


def test_gathered_fsdp_layers_keep_no_fp8_copy_to_their_backward():
    """torchao (framework: fsdp) casts inside each GEMM and saves the weight parameter, so a
    layer's casts are freed in its forward and made again in its backward (state/fp8.py,
    state/fp8_casts.py); no cached copy."""
    raw = tiny(framework="fsdp", precision={**FP32, "compute": "bf16"}, fp8={"recipe": "mxfp8"})
    raw["parallel"] = {"data": 2, "zero_stage": 3}
    r, inv, _ = timeline(without_kernel_table(raw))
    events = build_events(r, inv, 0)
    assert not [e for e in events if e.part == "FP8 weight copies (training.fp8)"]
    fp8 = [(e.moment, e.alloc) for e in events if e.part == "FP8 casts of GEMM operands (torchao)"]
    assert fp8 == [
        (f"{phase}: layer {i}", alloc)
        for phase, layers in (("forward", (0, 1)), ("backward", (1, 0)))
        for i in layers
        for alloc in (True, False)
    ]


def test_an_unknown_fp8_recipe_is_refused(tmp_path):
    from tiersim.core.errors import InputError

    with pytest.raises(InputError, match=r"training\.fp8\.recipe"):
        scenario(tiny(fp8={"recipe": "fp4"}))


# --- invariants over every shipped scenario -----------------------------------------------------


def _shipped():
    from pathlib import Path

    return sorted((Path(__file__).resolve().parents[1] / "scenarios").glob("*.yaml"))


@pytest.mark.parametrize("path", _shipped(), ids=lambda p: p.stem)
def test_timeline_invariants_of_every_shipped_scenario(path):
    """Every allocation is freed or held from the start; the allocator never reserves less
    than is allocated (requests round up); within the device, what fits stays under it."""
    from tiersim.config.load import load_scenario

    r = resolve(load_scenario(path).scenario)
    inv = build_inventory(r)
    t = gpu_timeline(r, inv)
    start = sum(e.nbytes for e in t.events if e.phase == "start")
    # the step gives back all it took; the pipeline's flush besides frees what the other
    # micro-batches held from the start (their activations and kept outputs)
    flushed = sum(e.nbytes for e in t.events if e.key in ("held", "pipeline outputs") and e.alloc)
    assert t.allocated[-1] == start - flushed
    assert min(t.allocated) >= 0
    assert all(res >= a for res, a in zip(t.reserved, t.allocated, strict=True))
    assert t.peak_allocated_bytes == max(t.allocated)
    assert sum(t.peak_parts.values()) == t.peak_allocated_bytes
    if t.fits:
        assert t.peak_total_bytes <= t.capacity_bytes
    # the saved activations live at the peak never exceed the inventory's class (each layer's
    # bytes rounded up to a whole byte apart: at most a byte an allocation more)
    saved = sum(b for p, b in t.peak_parts.items() if p.startswith("saved activations"))
    assert saved <= inv.per_gpu["activations"] + len(t.events)
