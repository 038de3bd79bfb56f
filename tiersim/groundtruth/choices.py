"""What `tiersim measure` offers to choose from (no torch, no pydantic: its --help reads them)."""

from __future__ import annotations

from tiersim.state.classes import OPTIMIZER_NAMES

DTYPES = ("bf16", "fp32")
OPTIMIZERS = tuple(n for n in OPTIMIZER_NAMES if n != "lion")  # torch.optim has no Lion
ATTENTION = ("sdpa", "eager", "math")  # math: tiersim's own eager attention (eager is the same)
IMPLEMENTATIONS = ("tiersim", "huggingface")  # the modules run: tiersim's own, or transformers
DEVICES = ("auto", "cpu", "cuda")
