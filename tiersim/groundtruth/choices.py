"""What `tiersim measure` offers to choose from (no torch, no pydantic: its --help reads them)."""

from __future__ import annotations

from tiersim.state.optimizers import DEFAULT, IN_PYTORCH

DTYPES = ("bf16", "fp32")
OPTIMIZERS = IN_PYTORCH  # torch.optim has no Lion; 8-bit AdamW is bitsandbytes' (measure extra)
OPTIMIZER_DEFAULT = DEFAULT

ATTENTION = ("sdpa", "eager", "math")  # math: tiersim's own eager attention (eager is the same)
IMPLEMENTATIONS = ("tiersim", "huggingface")  # the modules run: tiersim's own, or transformers
DEVICES = ("auto", "cpu", "cuda")
