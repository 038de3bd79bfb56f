"""A new user's review of the day's features (review e, docs/review-2026-12-06-d.md): each
confusing or wrong output found, held to what it now says."""

from __future__ import annotations

import pytest
from conftest import scenario

from tiersim.core.errors import InputError


def test_a_kernel_table_without_fp8_rates_is_not_said_to_expect_a_recipe_named_none():
    """gb200's table measures attention only (no GEMM rate published for the GB200): FP8
    linears on it said "expected one of: none", and `training.fp8.recipe: none` is no recipe."""
    raw = {
        "name": "f",
        "model": {"preset": "llama-2-7b"},
        "training": {"fp8": {"recipe": "delayed"}},
        "hardware": {"preset": "dgx-b200", "gpu": {"kernels": "gb200"}},
    }
    with pytest.raises(InputError) as caught:
        scenario(raw)
    text = str(caught.value)
    assert "expected one of: none" not in text
    assert "kernel table gb200 measures no FP8 GEMM at all" in text
    assert "--set training.fp8=null" in text
