"""Review 2026-12-07 (o): a new user's pass over what the last hour merged (FSDP2's mixed
precision and Accelerate's NO_WRAP, ZeRO++ hpZ under parameter offload, DeepSpeed's tensor
buckets and stage 0's all-reduce buckets, the context-parallel rerun, selective recompute's
time, review m's hidden tensor-parallel bytes; docs/review-2026-12-07-o.md). Each test fails
on the tree before its fix; expected values are worked by hand in each."""

from __future__ import annotations

from pathlib import Path

from engine_helpers import merge, scenario

from tiersim.config.load import load_scenario
from tiersim.state.inventory import build_inventory
from tiersim.state.resolved import resolve
from tiersim.workload.pinned import rounding_bytes
from tiersim.workload.work import build_workload

ROOT = Path(__file__).resolve().parent.parent


def test_fsdp2_pinned_gradients_rounded_at_the_dtype_they_are_held_in():
    # fsdp2-cpu-offload-llama2-7b (FSDP2, CPUOffloadPolicy(pin_memory=True), fp32 parameters)
    # with training.precision.gradients: bf16 (FSDP2's reduce_dtype): the reduced shard is cast
    # back to fp32 before it lands in .grad (torch 2.13 foreach_reduce), so the host's
    # gradients are fp32 tensors, pinned one by one, each rounded to a power of two, as the
    # weights are. Llama-2-7B's shards over 8 ranks, fp32:
    #   q, k, v, o 4,096 x 4,096 / 8 x 4 B = 8,388,608 = 2^23: no rounding
    #   gate, up, down 4,096 x 11,008 / 8 x 4 B = 22,544,384 -> 2^25: +11,010,048, 3 a layer
    #   norms 4,096 / 8 x 4 B = 2,048 = 2^11: none
    #   embedding and head 32,000 x 4,096 / 8 x 4 B = 65,536,000 -> 2^26: +1,572,864 each
    # a class: 32 x 3 x 11,010,048 + 2 x 1,572,864 = 1,060,110,336 B; weights and gradients
    # 2,120,220,672 B (the gradients counted at 2 B a value gave 530,055,168 B for them).
    path = ROOT / "scenarios" / "fsdp2-cpu-offload-llama2-7b.yaml"
    for gradients in ("fp32", "bf16"):
        loaded = load_scenario(path, [f"training.precision.gradients={gradients}"])
        r = resolve(loaded.scenario)
        inv = build_inventory(r)
        assert inv.per_gpu.as_dict()["gradients"] == 6_738_415_616 // 8 * 4
        assert rounding_bytes(r, r.execution.offload, inv) == 2 * 1_060_110_336


def test_hpz_secondary_split_with_the_submodules_it_belongs_to():
    # GPT-2 small, DeepSpeed ZeRO-3 over 16 GPUs, hpZ 8, weights in host memory
    # (offload_param cpu), stage3_prefetch_bucket_size 2e6: each layer fetched in 4 parts.
    # The secondary partition a GPU holds is the weights / 8 (every tensor divides by 16):
    # 124,439,808 values x 2 B / 8 = 31,109,952 B, a layer's 7,087,872 x 2 / 8 = 1,771,968 B.
    # Before, each part carried its layer's whole secondary: 12 x 4 x 1,771,968 + 9,846,336 =
    # 94,900,800 B held in the host, copied to the GPU at each fetch and back at each release.
    raw = {
        "name": "o",
        "model": {"preset": "gpt2"},
        "training": {
            "framework": "deepspeed",
            "micro_batch_size": 4,
            "grad_accumulation": 2,
            "seq_len": 1024,
            "optimizer": "adamw",
            "precision": {"weights": "bf16", "gradients": "bf16", "master": "fp32"},
            "deepspeed": {"zero_hpz_partition_size": 8},
            "offload": {"prefetch_bucket_size": 2_000_000},
        },
        "parallel": {"data": 16, "zero_stage": 3},
        "placement": {"weights": "dram"},
        "hardware": {"preset": "dgx-h100"},
    }
    units = build_workload(resolve(scenario(merge(raw, {})))).units
    layer0 = [u for u in units if u.name.startswith("L0.")]
    assert len(layer0) == 4
    assert sum(u.hpz_secondary for u in layer0) == 7_087_872 * 2 // 8 == 1_771_968
    assert sum(u.hpz_secondary for u in units) == 124_439_808 * 2 // 8 == 31_109_952


def test_hidden_tensor_collectives_bytes_by_hand_and_explained():
    # korthikanti2022-22b-selective-sp (Megatron, TP 8 with sequence parallelism, one micro-batch
    # of 4 x 2,048 tokens, h 6,144, 48 layers; overlap_tensor_backward on, as megatron ships):
    # a collective's tensor s x b x h x 2 B = 2,048 x 4 x 6,144 x 2 = 100,663,296 B, sent
    # 7/8 of it: 88,080,384 B. Each layer 4 in the forward (2 all-gathers, 2 reduce-scatters)
    # and 6 in the backward (the column-parallel inputs gathered again for the weight
    # gradients, their gradients reduce-scattered, the row-parallel outputs' gathered); the
    # embedding's reduce-scatter and its backward's gather, the head's gather, its backward's
    # gather and reduce-scatter: 48 x 10 + 5 = 485 x 88,080,384 = 42,718,986,240 B.
    # The backward's hidden ones move in no flow: the nvlink row read 42.72 GB with 85.44 ms
    # busy (25.63 GB at 300 GB/s) and no line saying why; with the overlap off, 142.40 ms.
    from tiersim.report.text import PRICED_NOTE, priced_outside_flows, step_tables
    from tiersim.runner import report_for

    path = ROOT / "scenarios" / "published" / "korthikanti2022-22b-selective-sp.yaml"
    report = report_for(load_scenario(path))
    nvlink = report["links"]["nvlink"]
    assert nvlink["bytes_by_direction"] == {"tensor": 485 * 88_080_384}
    assert "tensor-parallel collectives hidden" in PRICED_NOTE
    assert PRICED_NOTE in step_tables(report)
    # overlap_tensor_backward false: every byte in a flow, 42,718,986,240 B / 300 GB/s busy
    carried = dict(nvlink, busy_s=42_718_986_240 / 300e9)
    assert not priced_outside_flows({"nvlink": carried})


def test_fsdp2_reduce_scatter_carries_the_reduce_dtype():
    # fsdp2-cpu-offload-llama2-7b: FSDP2 with fp32 parameters and bf16 compute; its gradients
    # reduced in reduce_dtype (training.precision.gradients): foreach_reduce copies autograd's
    # bf16 gradients into a reduce-scatter input of that dtype, so the collective sends it.
    # A layer: 4 x 4,096^2 + 3 x 4,096 x 11,008 + 2 x 4,096 = 202,383,360 values, sent 7/8
    # over 8 ranks: fp32 202,383,360 x 4 x 7/8 = 708,341,760 B; bf16 354,170,880 B. Before,
    # both sent the bf16 figure (the gradient as autograd made it).
    path = ROOT / "scenarios" / "fsdp2-cpu-offload-llama2-7b.yaml"
    for gradients, per_value in (("fp32", 4), ("bf16", 2)):
        loaded = load_scenario(path, [f"training.precision.gradients={gradients}"])
        layer = build_workload(resolve(loaded.scenario)).units[0]
        assert layer.params == 4 * 4_096**2 + 3 * 4_096 * 11_008 + 2 * 4_096 == 202_383_360
        assert layer.dp_gradients.nbytes == 202_383_360 * per_value * 7 / 8


def test_inventory_note_says_fsdp2_holds_gradients_at_the_parameters_dtype():
    # `inventory fsdp2-cpu-offload-llama2-7b.yaml --set training.precision.gradients=bf16`
    # printed gradients 26.95 GB whole (6,738,415,616 x 4 B), 3.37 GB a GPU, with nothing
    # saying why a bf16 setting counts 4 B a value (FSDP2 casts the reduced shard back to the
    # parameters' fp32); the Accelerate import's note said it, a hand-written scenario not.
    from tiersim.report.inventory_note import split_note

    path = ROOT / "scenarios" / "fsdp2-cpu-offload-llama2-7b.yaml"
    for gradients, said in (("bf16", True), ("fp32", False)):
        s = load_scenario(path, [f"training.precision.gradients={gradients}"]).scenario
        inv = build_inventory(resolve(s))
        assert inv.per_gpu.as_dict()["gradients"] == 6_738_415_616 // 8 * 4
        note = split_note(s, inv)
        assert ("gradients (FSDP2): reduced in bf16" in note) is said
        assert ("held in the parameters' fp32" in note) is said


def test_fsdp2_root_group_keeps_its_vocabulary_gradients_under_megatron_accounting():
    # fsdp2-cpu-offload-llama2-7b (implementation megatron, as shipped) with the whole model one
    # FSDP2 unit (training.offload.fetch: model, Accelerate's NO_WRAP): after the embeddings'
    # backward, the one reduce-scatter's input in fp32 beside every unsharded bf16 gradient,
    # the root's embedding and head included (FSDP2 reduce-scatters a group after its whole
    # backward; Megatron's grad buffers are not what runs here):
    #   input 6,738,415,616 x 4 B = 26,953,662,464
    #   layers' gradients 32 x 202,383,360 x 2 B = 12,952,535,040
    #   embedding and head 2 x 32,000 x 4,096 x 2 B = 524,288,000
    #   resident workspace 17,039,360 (the inventory's)
    # 40,447,524,864 B; before, the two vocabulary gradients were missing (39,923,236,864).
    from tiersim.state.step_memory import gpu_timeline

    path = ROOT / "scenarios" / "fsdp2-cpu-offload-llama2-7b.yaml"
    r = resolve(load_scenario(path, ["training.offload.fetch=model"]).scenario)
    t = gpu_timeline(r, build_inventory(r))
    assert t.peak_event.moment == "backward: embeddings"
    want = 26_953_662_464 + 12_952_535_040 + 524_288_000 + 17_039_360
    assert t.peak_allocated_bytes == want == 40_447_524_864
