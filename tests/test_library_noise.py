"""Other libraries' import chatter stays out of tiersim's output: torchao's "Failed to load
..._C_mxfp8...so" / "_C_cutlass_90a" warnings and PyTorch's register_constant deprecation, which
`tiersim measure` printed when torchao was first imported (by tiersim's 8-bit AdamW or by
transformers)."""

from __future__ import annotations

import importlib.util
import logging
import subprocess
import sys
from pathlib import Path

import pytest

from tiersim.groundtruth.quiet_imports import quiet_imports

ROOT = Path(__file__).resolve().parent.parent
NOISE = ("Failed to load", "_C_mxfp8", "_C_cutlass", "register_constant", "_pytree")


def test_the_8bit_optimizers_are_built_without_import_noise():
    # the `measure` extra (found, not imported here: the import is what is checked)
    if any(importlib.util.find_spec(p) is None for p in ("torchao", "bitsandbytes")):
        pytest.skip("torchao or bitsandbytes is not installed")
    # a fresh interpreter: in this one torchao may be imported already, and quietly no more
    code = (
        "import torch\n"
        "from tiersim.groundtruth.torchmodels import make_optimizer\n"
        "make_optimizer('adamw8bit', [('w', torch.nn.Parameter(torch.zeros(4096)))])\n"
        "from tiersim.groundtruth.quiet_imports import quiet_import\n"
        "quiet_import('torchao.optim')  # AdamW8bit's, as the DTensor path imports it\n"
        "print('built')\n"
    )
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    said = done.stdout + done.stderr
    assert said.strip() == "built", [n for n in NOISE if n in said]


def test_the_quiet_loggers_are_restored_after_the_import():
    torchao = logging.getLogger("torchao")
    torchao.setLevel(logging.INFO)
    with quiet_imports():
        assert not torchao.isEnabledFor(logging.WARNING)
        assert torchao.isEnabledFor(logging.ERROR)  # an import that fails still says so
    assert torchao.level == logging.INFO
    torchao.setLevel(logging.NOTSET)
