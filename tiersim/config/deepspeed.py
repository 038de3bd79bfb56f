"""`training.deepspeed`: facts of the DeepSpeed a run uses, read only under
`training.framework: deepspeed` (set under another framework: a W-NO-EFFECT note).

`version`: the DeepSpeed release, `latest` (the default: the source tiersim read,
deepspeedai/DeepSpeed's stage_1_and_2.py at 02aa38c3, stage3.py at 007cca6a, zero/config.py
at 1b88ac36) or a release number MAJOR.MINOR.PATCH. It decides how ZeRO-1/2's gradient
reduce bucket is counted, whether `training.offload.reduce_bucket_size` is given or left out
(DeepSpeed's default 5e8 elements then):
- before 0.3.17 (DeepSpeed v0.3's stage2.py, what ZeRO-Offload ran; microsoft/DeepSpeed
  stage2.py at 00c3a254, `backward()`): `torch.empty(int(reduce_bucket_size * 4.5),
  dtype=torch.half)`, a second with overlap_comm, in the `workspace` class all step, each
  reduce dividing the whole buffer (state/buffers.py, workload/reduce_buckets.py);
- from 0.3.17 (deepspeedai/DeepSpeed PR #1042, "ZeRO stage 1 refresh", merged 2021-05-05:
  "Memory overhead bug fix ... inflating the bucket size (x4.5)"; stage2.py's checkpoint
  loader names 0.3.17 as the release ZeRO-1 changed in, microsoft/DeepSpeed 5336cd0f, whose
  `backward()` allocates `torch.empty(int(self.reduce_bucket_size), dtype=self.dtype)`):
  the bucket in the weights' dtype, a timeline part of its own from the backward's first
  gradient to its end, each reduce dividing what the bucket holds
  (state/deepspeed_buckets.py). tiersim tells releases apart at this boundary only.

`reduce_scatter`: DeepSpeed's `zero_optimization.reduce_scatter` (zero/config.py: true).
false: ZeRO-1/2's `average_tensor` and ZeRO-3's `__avg_scatter_contiguous_grads` all-reduce
each gradient bucket whole (workload/data_parallel.py), which Muon needs (DeepSpeed refuses
Muon with it true: config/optimizer_notes.py; Muon's step with it false:
state/deepspeed_muon.py).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BeforeValidator

from tiersim.config.fields import Strict

LATEST = "latest"
# elements: DeepSpeed's reduce_bucket_size where the key is left out, in every release
# (zero/config.py `pp_int(5e8)`, commit 1b88ac36; v0.3's stage2.py `reduce_bucket_size=500000000`)
DEFAULT_REDUCE_BUCKET = 500_000_000
# the first release whose ZeRO-1/2 reduce bucket is `reduce_bucket_size` elements of the
# weights' dtype (PR #1042), not v0.3's 4.5 x in fp16
BUCKET_RULE_CHANGED = (0, 3, 17)
EXPECTED = "a DeepSpeed release as text, MAJOR.MINOR.PATCH such as '0.3.16' or '0.16.4', or latest"


def reduce_bucket(given: int | None) -> int:
    """Elements of the reduce bucket DeepSpeed runs: `training.offload.reduce_bucket_size`,
    else its default."""
    return DEFAULT_REDUCE_BUCKET if given is None else given


def release(version: str) -> tuple[int, ...] | None:
    """(major, minor, patch) of a validated version; None for `latest`."""
    return None if version == LATEST else tuple(int(part) for part in version.split("."))


def _release_text(value: object) -> object:
    """A version as YAML gives it: text of three whole numbers, or `latest` (0.3 or 1 would
    arrive as numbers and lose their parts: refused with what to write)."""
    if not isinstance(value, str):
        raise ValueError(f"expected {EXPECTED} (got {value!r}: write it in quotes)")
    text = value.strip()
    parts = text.split(".")
    if text != LATEST and (len(parts) != 3 or not all(p.isdigit() and len(p) < 6 for p in parts)):
        raise ValueError(f"expected {EXPECTED} (got {value!r})")
    return text if text == LATEST else ".".join(str(int(p)) for p in parts)


DeepSpeedVersion = Annotated[str, BeforeValidator(_release_text)]


class DeepSpeed(Strict):
    """`training.deepspeed`: the DeepSpeed release and ZeRO settings that decide what one GPU
    holds and sends (read only under `training.framework: deepspeed`)."""

    # the DeepSpeed release: latest (the source tiersim read) or MAJOR.MINOR.PATCH; before
    # 0.3.17 ZeRO-1/2's reduce bucket is v0.3's 4.5 x in fp16 (module docstring)
    version: DeepSpeedVersion = LATEST
    # zero_optimization.reduce_scatter: false all-reduces each gradient bucket whole (Muon
    # runs under ZeRO only so); true: DeepSpeed's default
    reduce_scatter: bool = True

    @property
    def v03_bucket(self) -> bool:
        """ZeRO-1/2's reduce bucket by v0.3's rule (4.5 x in fp16, all step, whole-buffer
        divisions): a release before 0.3.17."""
        number = release(self.version)
        return number is not None and number < BUCKET_RULE_CHANGED
