"""DeepSpeed's AutoTP training (`tensor_parallel.autotp_size`) onto parallel.tensor, and what
DeepSpeed does with it beside ZeRO-3.

`TPTrainingConfig.autotp_size` (runtime/tensor_parallel/config.py; 0, its default, disabled)
shards the linear layers over that many GPUs, the data-parallel size the world over it
(transformers' Trainer: dp_world_size = world_size // autotp_size; review 2026-12-07-i).

Beside `zero_optimization.stage: 3`: DeepSpeed up to 0.19.3 asserted in engine.py
`_configure_tensor_parallel_states` `self.zero_optimization_stage() <= 2`, "Currently, the
compatibility between 'autotp' and 'zero_stage = 3' has not been validated"; from 0.19.4 the
assertion is gone and the same function says "AutoTP + ZeRO stage 3 is supported for both
inference and training" (read in the PyPI releases 0.19.3, 0.19.4 and 0.19.8). A DeepSpeed
config names no release, and tiersim reads DeepSpeed as its latest
(`training.deepspeed.version`, docs/deepspeed-version.md): kept, with a note.
"""

from __future__ import annotations

from typing import Any

from tiersim.frameworks.mapping import Mapped
from tiersim.frameworks.values import integer, table


def tensor_parallel(out: Mapped, key: str, value: Any) -> None:
    """`tensor_parallel.autotp_size` > 1: parallel.tensor; its other keys noted."""
    section = table(key, value)
    for sub, val in section.items():
        where = f"{key}.{sub}"
        if sub != "autotp_size":
            out.unmapped(where, val)
            continue
        size = integer(where, val, low=0)
        if size > 1:
            out.put("parallel.tensor", size, where)
            out.facts["model_parallel"] = size
            out.facts["autotp"] = where


def at_zero3(out: Mapped) -> None:
    """AutoTP beside ZeRO-3: run by DeepSpeed from 0.19.4, refused by it before (said)."""
    where = out.facts.pop("autotp", None)
    if where is None or out.values.get("parallel.zero_stage") != 3:
        return
    why = (
        "beside zero_optimization.stage 3: run as ZeRO-3 over the data-parallel ranks of each "
        "tensor-parallel shard (DeepSpeed 0.19.4 and later, engine.py: 'AutoTP + ZeRO stage 3 "
        "is supported'); DeepSpeed up to 0.19.3 refuses it ('the compatibility between "
        "'autotp' and 'zero_stage = 3' has not been validated')"
    )
    out.note(where, why)
