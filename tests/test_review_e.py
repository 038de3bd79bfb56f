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


def test_run_s_table_says_the_prefetch_depth_a_set_changed(cli, tmp_path):
    """`--set simulation.prefetch_depth=3` on the FSDP2 scenario moved the step and the
    all-gather buffer (404.77 MB -> 1.21 GB: 3 layers' all-gather buffers in backward) and
    no line said why. FSDP2's default is 1 (its own prefetch: config/framework.py), so 3 is
    its explicit prefetch with 3 - 1 = 2 buffers more."""
    path = "scenarios/fsdp2-cpu-offload-llama2-7b.yaml"

    def offload_line(*sets: str) -> str:
        flags = [a for s in sets for a in ("--set", s)]
        code, out, err = cli("run", path, "--out", tmp_path / "t", *flags)
        assert code == 0, err
        return next(x for x in out.splitlines() if x.startswith("Offload"))

    assert "; prefetch depth 1 (simulation.prefetch_depth, FSDP2's default);" in offload_line()
    assert (
        "; prefetch depth 3 (simulation.prefetch_depth; FSDP2's default 1): FSDP2's explicit "
        "prefetch, 2 all-gather buffers more in each layer's backward;"
    ) in offload_line("simulation.prefetch_depth=3")
