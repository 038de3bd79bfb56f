"""torch.optim's single-tensor AdamW on CPU tensors (state/single_tensor_adam.py): a parameter's
two temporaries (the square root, the quotient) beside the previous parameter's denominator,
which the loop's variable keeps until the new one is assigned. By hand on the three models of
issue 38's matrix (groundtruth/matrix_cells.py), fp32, one rank; measured on all of them
under FSDP2 by tests/test_fsdp2_step.py (the optimizer phases, within 3 %; the grouped-query
model's was -2.85 % while two of the largest were counted)."""

from __future__ import annotations

import dataclasses

import pytest
from conftest import scenario

from tiersim.groundtruth.matrix_cells import matrix_raw
from tiersim.state.activations import accounting_for
from tiersim.state.resolved import resolve
from tiersim.state.single_tensor_adam import peak_values
from tiersim.state.step_optimizer import optimizer_temporaries


def cpu_temporaries(name: str) -> int:
    s = scenario(matrix_raw(name, "none", "fp32", "adamw", 1))
    r = dataclasses.replace(resolve(s), accounting=accounting_for(s, "cpu"))
    what, nbytes = optimizer_temporaries(r, 0)
    assert what == "optimizer step temporaries"
    return nbytes


@pytest.mark.parametrize(
    ("name", "values"),
    [
        # grouped-query: gate, up and down 128 x 512 = 65,536 values each, in a row: up's two
        # beside gate's denominator, 3 x 65,536 (two of the largest were 131,072)
        ("gqa", 3 * 65_536),
        # dense: the MLP's 64 x 128 = 8,192 a matrix, 3 x 8,192 = 24,576; the head 512 x 64 =
        # 32,768 twice beside the final norm's 64: 65,600
        ("dense", 2 * 32_768 + 64),
        # Qwen2-MoE: the fused experts' gate_up 4 x 192 x 64 = 49,152 twice beside the
        # router's 4 x 64 = 256: 98,560 (down 4 x 64 x 96 = 24,576 twice beside gate_up's
        # 49,152: 98,304; the shared expert's 160 x 64 = 10,240 three in a row: 30,720)
        ("moe", 2 * 49_152 + 256),
    ],
)
def test_one_parameters_two_temporaries_beside_the_previous_denominator(name, values):
    assert cpu_temporaries(name) == values * 4


def test_without_the_tensors_two_of_the_largest():
    assert peak_values((), 1, 1_000) == 2_000
