"""The host's CPU optimizer rate: parameters an AdamW step on the CPU updates per second.

PyTorch's AdamW on one flat fp32 CPU tensor (parameters, gradients and both moments fp32, as
an offloaded optimizer holds them), timed step by step after a first step that creates the
moments. Two implementations: the fused kernel (`fused=True`: one pass over the four arrays)
and PyTorch's default (what an optimizer made without options runs, as FSDP's CPU offload
does). Neither is DeepSpeed's CPU path, whose clipping and fp32 copies cost more per
parameter (docs/validation.md), so the preset's `cpu.optimizer_rate` is not replaced: the
figures are there to choose it by. Without PyTorch they are skipped, and say so.
"""

from __future__ import annotations

from typing import Any

from tiersim.groundtruth.figure import Figure, first_line, timed

IMPLEMENTATIONS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("fused", {"fused": True}),
    ("default", {}),
)


def optimizer_figures(params: int, repeats: int, threads: int, notes: list[str]) -> list[Figure]:
    """AdamW rates on `params` fp32 parameters with `threads` threads, one per implementation
    PyTorch runs here; what it cannot run becomes a note."""
    try:
        import torch
    except ImportError:
        notes.append("CPU optimizer not measured: PyTorch is not installed (tiersim[measure])")
        return []
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        found = [_adamw(torch, name, kw, params, repeats, notes) for name, kw in IMPLEMENTATIONS]
    finally:
        torch.set_num_threads(previous)
    figures = [f for f in found if f is not None]
    if figures:
        notes.append(
            "the cpu adamw rates are this whole host's kernels (divide by the GPUs that share "
            "it); DeepSpeed's CPU path runs far slower per parameter (docs/validation.md): set "
            "cpu.optimizer_rate (and, for DeepSpeed's CPU-Adam kernel, cpu.adam_kernel_rate) for "
            "the optimizer you run"
        )
    return figures


def _adamw(
    torch: Any, name: str, options: dict[str, Any], params: int, repeats: int, notes: list[str]
) -> Figure | None:
    weights = torch.zeros(params, dtype=torch.float32, requires_grad=True)
    weights.grad = torch.full_like(weights, 1e-3)
    try:
        optimizer = torch.optim.AdamW([weights], lr=1e-3, **options)
        times = timed(optimizer.step, repeats)
    except (RuntimeError, ValueError, TypeError) as exc:  # e.g. no fused CPU kernel in a build
        notes.append(f"cpu adamw rate ({name}) not measured: {first_line(exc)}")
        return None
    given = ", ".join(f"{k}={v}" for k, v in options.items()) or "no options"
    return Figure(
        f"cpu adamw rate ({name})",
        "param/s",
        tuple(params / t for t in times),
        f"torch {torch.__version__} AdamW ({given}) step on {params:,} fp32 parameters with "
        f"{torch.get_num_threads()} thread(s); parameters updated per second",
    )
