"""Other libraries' import-time chatter kept out of tiersim's output: torchao 0.18.0 logs a
warning for each of its CUDA extensions this build cannot load ("Failed to load
.../_C_mxfp8...so", "_C_cutlass_90a.abi3.so": torchao/__init__.py, logger "torchao"), and
registering its enums makes PyTorch warn that register_constant on an Enum is deprecated
(torch/utils/_pytree.py, logger "torch.utils._pytree"); bitsandbytes' CPU backend logs a kernel
it cannot download ("Failed to load CPU gemm_4bit_forward from kernels-community":
bitsandbytes/backends/cpu/ops.py). transformers imports torchao wherever it is installed
(transformers/integrations/torchao.py), so `tiersim measure` printed them. None says anything
about the user's run; the loggers' levels are raised only while the import runs."""

from __future__ import annotations

import contextlib
import importlib
import logging
import warnings
from collections.abc import Iterator
from types import ModuleType

NOISY_LOGGERS = ("torchao", "torch.utils._pytree", "bitsandbytes")


@contextlib.contextmanager
def quiet_imports(loggers: tuple[str, ...] = NOISY_LOGGERS) -> Iterator[None]:
    """Within: `loggers` report errors only, and Python warnings are not shown."""
    chosen = [logging.getLogger(name) for name in loggers]
    levels = [logger.level for logger in chosen]
    for logger in chosen:
        logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for logger, level in zip(chosen, levels, strict=True):
            logger.setLevel(level)


def quiet_import(name: str) -> ModuleType:
    """`importlib.import_module(name)` inside `quiet_imports` (the first import is the noisy
    one; later ones find the module loaded). ImportError where it is not installed."""
    with quiet_imports():
        return importlib.import_module(name)
