"""What FP8 training under Megatron-Core and Transformer Engine keeps per GPU (issue 38), each
figure worked out by hand from the source it follows (docs/memory.md, "FP8 training"):

- TE's cached FP8 weights (NVIDIA/TransformerEngine transformer_engine/pytorch/module/base.py
  at 0004dbd0, `set_fp8_weights`): per linear weight `weight1_fp8` and its transpose
  `weight1_t_fp8` (Hopper's FP8 GEMMs read only the TN layout), uint8 data, each with an fp32
  scale_inv; module attributes made by `prepare_forward` when `is_first_microbatch` is not
  None, which Megatron-Core passes, so they are live from the start of every step;
- delayed scaling's metadata per GEMM (base.py `set_meta_tensor`): 3 forward FP8 tensors
  (input, weight, output) and 2 backward (grad_output, grad_input), each `amax_history_len`
  (1024) fp32 history rows, an fp32 scale and an fp32 scale_inv;
- Megatron's optimizers hand Adam `main_param.grad = model_grad.float()`
  (megatron/core/optimizer/distrib_optimizer.py `_copy_model_grads_to_main_grads`): a view
  of fp32 main grads, an fp32 copy of bf16 ones (--grad-reduce-in-bf16).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from conftest import scenario
from test_memory_timeline import TINY  # a tiny Llama-style model: the loss's tensors dominate

from tiersim.config.load import load_scenario
from tiersim.state.inventory import build_inventory
from tiersim.state.resolved import resolve
from tiersim.state.step_memory import build_events
from tiersim.state.step_optimizer import MEGATRON_GRAD_COPY, optimizer_temporaries

ROOT = Path(__file__).resolve().parents[1]
FP8_COPIES = "FP8 weight copies (training.fp8)"

# delayed scaling's metadata for one GEMM: (3 + 2) tensors x (1,024 history rows + scale +
# scale_inv) x 4 B
META = (3 + 2) * (1024 + 2) * 4


def test_delayed_metadata_is_5_tensors_of_history_scale_and_scale_inv():
    assert META == 20_520


@pytest.fixture(scope="module")
def llama3_8b():
    r = resolve(load_scenario(ROOT / "scenarios/published/nemo2407-llama3-8b-8gpus.yaml").scenario)
    return r, build_inventory(r)


def test_llama3_8b_fp8_workspaces_live_from_the_start_of_the_step(llama3_8b):
    """Llama 3 8B (h 4,096, 32 heads, 8 KV heads of 128, FFN 14,336, 32 layers), tensor 1:
    Megatron-Core's four TE linears a layer (state/held_layout.py): linear_qkv (32 + 2 x 8)
    x 128 = 6,144 x 4,096, linear_proj 4,096 x 4,096, linear_fc1 2 x 14,336 = 28,672 x
    4,096, linear_fc2 4,096 x 14,336: 25,165,824 + 16,777,216 + 117,440,512 + 58,720,256 =
    218,103,808 values. Delayed scaling: 2 B a value (data + cached transpose), 2 x 4 B of
    scale_inv and 20,520 B of metadata per weight (4 of them, 7 when q, k, v and gate, up
    were counted apart): 436,207,616 + 4 x 20,528 = 436,289,728 B a layer."""
    r, inv = llama3_8b
    assert 25_165_824 + 16_777_216 + 117_440_512 + 58_720_256 == 218_103_808
    per_layer = 2 * 218_103_808 + 4 * (2 * 4 + META)
    assert per_layer == 436_289_728
    fp8 = [e for e in build_events(r, inv, 0) if e.part == FP8_COPIES]
    assert [(e.moment, e.nbytes) for e in fp8] == [("start of the step", 32 * per_layer)]
    assert 32 * per_layer == 13_961_271_296  # the 13.96 GB beside the bf16 weights


def _megatron(gradients: str):
    precision = {"weights": "bf16", "gradients": gradients, "master": "fp32", "optimizer": "fp32"}
    raw = {
        "name": "tiny",
        "model": TINY,
        "training": {"framework": "megatron", "seq_len": 128, "precision": precision},
        "parallel": {"data": 2, "zero_stage": 1},
    }
    return resolve(scenario(raw))


def test_megatron_copies_bf16_main_grads_to_fp32_for_its_shard():
    """The tiny model's parameters: embedding 32,000 x 64 = 2,048,000; each of 2 layers q, k,
    v, o 64 x 64 (16,384), gate, up, down 64 x 128 (24,576), two RMSNorms 128: 41,088; final
    norm 64 and head 32,000 x 64: 2,048,064; total 4,178,240. The distributed optimizer over 2
    ranks updates 2,089,120 of them: an fp32 copy of their bf16 grads, 8,356,480 B."""
    params = 2_048_000 + 2 * (16_384 + 24_576 + 128) + 64 + 2_048_000
    assert params == 4_178_240
    r = _megatron("bf16")
    assert optimizer_temporaries(r, 0) == (MEGATRON_GRAD_COPY, 4 * math.ceil(params / 2))
    events = [e for e in build_events(r, build_inventory(r), 0) if e.part == MEGATRON_GRAD_COPY]
    # allocated at the optimizer step; freed by the next step's zero_grad (the timeline's end);
    # made a tensor a parameter (shard), grouped by size (tests/test_step_temporaries_list.py)
    assert {e.phase for e in events} == {"optimizer"}
    made, freed = [e.nbytes for e in events if e.alloc], [e.nbytes for e in events if not e.alloc]
    assert sum(made) == sum(freed) == 8_356_480 and len(made) == len(freed)


def test_megatron_with_fp32_main_grads_hands_them_over_as_they_are():
    assert optimizer_temporaries(_megatron("fp32"), 0) == ("", 0)
