"""Context parallelism: tokens, attention shapes, activation bytes and communication per rank
under each `parallel.context_comm`, with the arithmetic written out here.

The model: a GPT-like layer (layernorm, learned positions, 4h MLP, multi-head attention) so
that Korthikanti et al. 2022's formula holds: h = 512, a = 8 heads of 64, s = 4096, b = 1;
tensor 2 with sequence parallelism, context 4, on a DGX H100 (8 GPUs a node).
"""

from __future__ import annotations

import json

import pytest
from engine_helpers import merge, scenario

from tiersim.config.mesh import Mesh
from tiersim.state.inventory import build_inventory, layer_activation_bytes
from tiersim.state.resolved import resolve
from tiersim.workload import kernels
from tiersim.workload.comms import alone_s
from tiersim.workload.work import build_workload

MIB = 1024 * 1024

BASE = {
    "name": "cp",
    "model": {
        "layers": 2,
        "hidden": 512,
        "heads": 8,
        "ffn_hidden": 2048,
        "vocab": 1000,
        "max_positions": 4096,
    },
    "training": {
        "implementation": "megatron",
        "attention_kernel": "eager",
        "micro_batch_size": 1,
        "grad_accumulation": 2,
        "seq_len": 4096,
        "precision": {"weights": "bf16", "gradients": "bf16", "master": "fp32"},
    },
    "parallel": {"tensor": 2, "context": 4, "sequence": True},
    # GEMMs timed at a fixed share of peak (no kernel table), so the ring's overlap below is
    # worked out by hand from one rate: 989 TFLOP/s x 0.781
    "hardware": {"preset": "dgx-h100", "gpu": {"kernels": None, "efficiency": 0.781}},
}


def resolved(**over):
    return resolve(scenario(merge(BASE, over)))


def layer_unit(r):
    return next(u for u in build_workload(r).units if u.name == "L0")


def test_tokens_and_attention_shape_per_rank():
    # each rank: s/c = 4096/4 = 1024 queries (and tokens) over all s = 4096 keys; its
    # scores: b x heads/t x 1024 x 4096 = 1 x 4 x 4,194,304 = 16,777,216
    r = resolved()
    sh = kernels._Shape(r, r.model)
    assert (sh.seq, sh.keys, sh.tokens) == (1024, 4096, 1024)
    assert sh.e_a == 16_777_216
    # hidden states of one rank's micro-batch on a tensor rank under sequence parallelism:
    # 1024 x 512 / 2 = 262,144 values
    assert sh.e == 262_144


def test_activation_bytes_per_rank_follow_korthikanti_over_c():
    # Korthikanti et al. 2022 with sequence parallelism: s·b·h·(34 + 5·a·s/h)/t per layer;
    # s·b·h = 4096·512 = 2,097,152; 5·a·s/h = 5·8·4096/512 = 320; 2,097,152 x 354 / 2 =
    # 371,195,904 bytes. A context rank keeps 1/4: its 1024 tokens' 34 terms and its 1024 x
    # 4096 scores' 5·a terms: 92,798,976 bytes.
    whole = resolved(parallel={"context": 1})
    split = resolved()
    shape = whole.model
    assert layer_activation_bytes(whole, shape) == pytest.approx(371_195_904)
    assert layer_activation_bytes(split, shape) == pytest.approx(92_798_976)


def test_gpus_and_tokens():
    # world = data x tensor x pipeline x context = 1 x 2 x 1 x 4 = 8 GPUs; a step's tokens
    # are the data-parallel sequences': 4096 x 1 x 2 micro-batches x data 1 = 8192 (the
    # context ranks share each sequence)
    r = resolved()
    assert Mesh.of(r.execution.parallel).world == 8
    assert build_workload(r).tokens_per_step == 8192


def test_ring_exchange_bytes_and_overlap():
    # K/V of one rank: 1024 tokens x 2 (K, V) x 8/2 heads x 64 x 2 B = 1,048,576 B = 1 MiB.
    # Forward: c - 1 = 3 chunks = 3 MiB; backward: K/V and dK/dV, 6 MiB.
    # No SM count: the GEMMs at peak x efficiency without wave quantization, so the attention
    # the ring runs beside (as the layer's own kernels time it) is worked out by hand below.
    r = resolved(hardware={"gpu": {"sm_count": None}})
    u = layer_unit(r)
    sent_f = sum(c.nbytes for c in (u.cp_forward, u.cp_forward_hidden) if c is not None)
    sent_b = sum(c.nbytes for c in (u.cp_backward, u.cp_backward_hidden) if c is not None)
    assert sent_f == pytest.approx(3 * MIB)
    assert sent_b == pytest.approx(6 * MIB)
    # on NVLink (450 GB/s; ranks 0, 2, 4, 6 share a node) 3 MiB take ~8 us alone, and the
    # attention forward runs 4·b·s²·(a·d)/t/c = 4 x 4096² x 512 / 2 / 4 = 4,294,967,296
    # FLOPs at 989 TFLOP/s x 0.781 = 5.56 us (eager: every score computed), 3/4 of it =
    # 4.17 us beside the transfers, so part of the ring is exposed
    rate = 989e12 * 0.781
    attention_f = 4.0 * 4096**2 * 512 / 2 / 4 / rate
    assert attention_f == pytest.approx(5.56e-6, rel=1e-3)
    whole_f = alone_s(r, u.cp_forward) + alone_s(r, u.cp_forward_hidden)
    exposed = whole_f - attention_f * 3 / 4
    assert exposed > 0
    # the blocking part carries exposed / whole of the bytes, the rest flows beside compute
    assert u.cp_forward.nbytes == pytest.approx(3 * MIB * exposed / whole_f)
    assert u.cp_forward_hidden.nbytes == pytest.approx(3 * MIB * (1 - exposed / whole_f))


def test_ring_hides_under_long_attention():
    # s = 32768 (max_positions raised): attention forward grows as s², 64 x the FLOPs per
    # rank (4·32768²·512/2/4 = 2.75e11, 356 us) while the K/V chunk grows as s (8 MiB, 24 MiB
    # forward, ~60 us on NVLink): the ring is hidden, nothing blocks
    r = resolved(training={"seq_len": 32768}, model={"max_positions": 32768})
    u = layer_unit(r)
    assert u.cp_forward is None and u.cp_backward is None
    assert u.cp_forward_hidden.nbytes == pytest.approx(3 * 8 * MIB)
    assert u.cp_backward_hidden.nbytes == pytest.approx(6 * 8 * MIB)


def test_all_gather_holds_the_gathered_kv():
    # all_gather: forward gathers 4 x 1 MiB, sending (c-1)/c of it = 3 MiB; backward gathers
    # again and reduce-scatters dK/dV: 6 MiB; all blocking. The gathered 4 MiB buffer adds to
    # the workspace.
    ring, gather = resolved(), resolved(parallel={"context_comm": "all_gather"})
    u = layer_unit(gather)
    assert u.cp_forward.nbytes == pytest.approx(3 * MIB)
    assert u.cp_backward.nbytes == pytest.approx(6 * MIB)
    assert u.cp_forward_hidden is None
    more, base = build_inventory(gather).per_gpu, build_inventory(ring).per_gpu
    assert more["workspace"] - base["workspace"] == 4 * MIB


def test_all_to_all_exchanges_heads():
    # Ulysses: Q, K, V and the output, this rank's tokens x its tensor rank's heads:
    # 1024 x (256 + 256 + 256 + 256) values x 2 B = 2 MiB; each all-to-all keeps 1/c:
    # 3/4 x 2 MiB = 1.5 MiB forward, the same for the gradients backward
    u = layer_unit(resolved(parallel={"context_comm": "all_to_all"}))
    assert u.cp_forward.nbytes == pytest.approx(1.5 * MIB)
    assert u.cp_backward.nbytes == pytest.approx(1.5 * MIB)


def test_full_recompute_reruns_the_forward_exchange():
    # full recompute: backward = the forward's 3 MiB again + its own 6 MiB (all_gather)
    r = resolved(parallel={"context_comm": "all_gather"}, training={"recompute": "full"})
    u = layer_unit(r)
    assert u.cp_backward.nbytes == pytest.approx(9 * MIB)


def test_context_run_reports(cli, write, tmp_path):
    # a run under each style exits 0 and reports; ZeRO-1 shards over data x context: with
    # data 2 and context 4, 8 ranks (fp32 master 4 B + Adam 8 B = 12 B a parameter, / 8)
    for style in ("ring", "all_gather", "all_to_all"):
        doc = merge(BASE, {"parallel": {"context_comm": style, "zero_stage": 1, "data": 2}})
        out_dir = tmp_path / style
        code, _, err = cli("run", write(doc), "--format", "json", "--out", out_dir)
        assert code == 0, err
    one = resolved(parallel={"zero_stage": 1, "data": 2})
    inv = build_inventory(one)
    whole = resolved(parallel={"zero_stage": 1, "data": 1, "context": 1})
    unsharded = build_inventory(whole)
    assert inv.per_gpu["optimizer"] == pytest.approx(unsharded.per_gpu["optimizer"] / 8, abs=8)


def test_plan_varies_context_like_any_key(cli, write):
    # context 1, 2, 4 over the same 4096-token sequences: each splits 4096 into 2c chunks
    doc = merge(BASE, {"plan": {"parallel.context": [1, 2, 4]}})
    code, out, err = cli("plan", write(doc), "--format", "json", "--workers", "1")
    assert code == 0, err
    chosen = [p["overrides"] for p in json.loads(out)["plans"]]
    assert sorted(chosen) == [[f"parallel.context={c}"] for c in (1, 2, 4)]
    # context 3 cannot split 4096 tokens into 6 chunks: refused before the search, by index
    doc = merge(BASE, {"plan": {"parallel.context": [1, 3]}})
    code, out, err = cli("plan", write(doc), "--workers", "1")
    assert code == 2 and "Traceback" not in err
    assert "plan.parallel.context[1]: is 3: the sequence (4096 tokens" in err


def test_the_memory_timeline_holds_a_context_rank_s_tokens():
    # the loss's logits on one GPU: its s/c tokens x micro-batch x the vocabulary over t,
    # 4096 / 4 x 1 x ceil(1000 / 2) = 1024 x 500 = 512,000 values (not the whole sequence's
    # 2,048,000); a layer's saved bytes are the whole sequence's / c, as the inventory's
    from tiersim.state.layer_memory import layer_memory
    from tiersim.state.step_memory import logits_values

    r = resolved()
    assert logits_values(r) == 512_000
    whole = resolved(parallel={"tensor": 2, "context": 1, "sequence": True})
    assert layer_memory(r, 0)[0].saved * 4 == pytest.approx(layer_memory(whole, 0)[0].saved)
