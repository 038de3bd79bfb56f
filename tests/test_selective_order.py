"""Selective recompute's working set where it exists (issue 38, state/selective_order.py):
autograd runs the MLP's backward, the post-attention norm's and the out-projection's before the
checkpointed attention core recomputes, so those saved tensors are freed first. By hand on the
grouped-query model of tests/test_step_measure.py (eager attention, bf16, huggingface)."""

from __future__ import annotations

import dataclasses

from conftest import scenario

from tiersim.state.activations import accounting_for
from tiersim.state.inventory import build_inventory
from tiersim.state.layer_memory import layer_memory
from tiersim.state.resolved import resolve
from tiersim.state.step_memory import build_events
from tiersim.state.timeline import evaluate

GQA = {"hidden": 128, "heads": 4, "kv_heads": 2, "ffn_hidden": 512, "vocab": 128}
LLAMA = {"layers": 2, "norm": "rmsnorm", "position": "rope", "gated_mlp": True}


def resolved(recompute: str, kernel: str = "eager"):
    precision = {k: "bf16" for k in ("weights", "gradients", "optimizer")} | {"master": "none"}
    training = {"seq_len": 128, "precision": precision, "workspace": "0 B"}
    training |= {"implementation": "huggingface", "attention_kernel": kernel}
    model = {**LLAMA, **GQA, "tied_embeddings": False, "max_positions": 256}
    s = scenario({"name": "sel", "model": model, "training": training | {"recompute": recompute}})
    return dataclasses.replace(resolve(s), accounting=accounting_for(s, "cpu"))


def test_the_mlp_share_of_the_saved_set_by_hand():
    # t = s·b = 128 tokens, h = 128, f = 512, bf16 (2 B), 4 heads of 32:
    #   MLP input 2·128·128 = 32,768; gate, SiLU, up outputs and down input 4·2·128·512 =
    #   524,288; post-attention RMSNorm: fp32 input 4·128·128 = 65,536, fp32 1/rms 4·128 =
    #   512, normalised 2·128·128 = 32,768; o_proj input 2·128·(4·32) = 32,768
    #   = 688,640 B in 2 + 3 + 1 = 6 tensors
    # the core's peak: the recomputed fp32 softmax of b·heads·s² = 4·128·128 = 65,536 scores
    #   (262,144 B), its gradient cast up to fp32 and the softmax's fp32 backward result, 3 x
    #   262,144 = 786,432 B (its two saved s² tensors, 393,216 B, below it), and K and V
    #   repeat_kv recomputed to every head (2 kv heads of 4: new tensors), 2·2·128·(4·32) =
    #   65,536 B: 851,968 B; beside it the gradient flowing between layers 2·128·128 = 32,768 B
    for lay in layer_memory(resolved("selective"), 0):
        assert (lay.first, lay.first_items) == (688_640, 6)
        assert (lay.recompute, lay.core_working) == (851_968, 32_768)
        # the weights' gradients made before the core (FSDP2 holds them unsharded then): the
        #   MLP's 3·128·512 = 196,608, o_proj's 128·128 = 16,384, the post-attention norm's
        #   128 = 213,120 values (not q's, k's and v's, nor the input norm's)
        assert lay.core_grads == 213_120


def test_recompute_is_allocated_after_the_mlp_share_is_freed():
    r = resolved("selective")
    events = build_events(r, build_inventory(r), 0)
    keys = [(e.key, e.alloc) for e in events if e.moment == "backward: layer 1"]
    assert keys.index(("saved first 1", False)) < keys.index(("recompute 1", True))
    # the layer's backward peaks in its MLP's backward: the whole saved set and the
    # transients (2·128·128 + 2·2·128·512 = 294,912 B); then the MLP's share is freed, its
    # gradients too (the flowing one, 32,768 B, left) and the core's 851,968 B allocated:
    # -688,640 - 294,912 + 32,768 + 851,968 = 98,816 B below the MLP's moment
    t = evaluate("cpu", float("inf"), events, [])
    at = [a for e, a in zip(t.events, t.allocated, strict=True) if e.moment == "backward: layer 1"]
    steps = [at[k + 1] - at[k] for k in range(4)]
    assert steps == [-688_640, -294_912, 32_768, 851_968]
    assert max(at) == at[0] == at[4] + 98_816


def test_without_the_s_squared_terms_the_core_reruns_for_its_log_sum_exp():
    """SDPA keeps no s x s term, but its checkpointed core keeps no log-sum-exp either
    (state/hf_selective.py): the core reruns in backward after the MLP's share is freed, its
    fp32 log-sum-exp 4·a·s·b = 4·4·128·1 = 2,048 B the recompute; without selective recompute
    the saved set is freed whole as before."""
    for lay in layer_memory(resolved("selective", "sdpa"), 0):
        assert (lay.first, lay.first_items, lay.recompute) == (688_640, 6, 2_048)
    for recompute in ("none", "full"):
        assert all(lay.first == 0 for lay in layer_memory(resolved(recompute, "eager"), 0))
