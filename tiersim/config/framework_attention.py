"""What `training.framework: megatron` implies for the fused attention kernel: the one
Transformer Engine picks on the scenario's GPU, resolved once into the execution plan
(config/execution.py) and the scenario.yaml a run writes (config/document.py); a
`training.flash_kernel` given always wins.

Megatron-Core runs attention through Transformer Engine's DotProductAttention (its default
`--transformer-impl transformer_engine`), which on Hopper and later GPUs prefers cuDNN's fused
attention to FlashAttention: transformer_engine/pytorch/attention/dot_product_attention/
utils.py, get_attention_backend, "Disabling FlashAttention to give FusedAttention preference
on Hopper+ for performance reasons" (device_compute_capability >= (9, 0), FusedAttention's
F16_arbitrary_seqlen backend). So `attention_kernel: flash` under megatron on a GPU whose
kernel table gives compute capability 9.0 or more and measures cuDNN's attention is timed as
`cudnn`; elsewhere (no framework, another, an Ampere GPU, a table without cuDNN's rates) the
kernel model's default, FlashAttention-2, stays.
"""

from __future__ import annotations

from tiersim.config.kernel_checks import table_value
from tiersim.config.schema import Scenario, Training

HOPPER = 9.0  # Transformer Engine's (9, 0): cuDNN's fused attention preferred from here on


def resolved_flash_kernel(s: Scenario) -> str | None:
    """`training.flash_kernel` as given, else its framework's choice on this GPU (None: the
    kernel model's default, FlashAttention-2)."""
    tr, kernels = s.training, s.hardware.gpu.kernels
    if tr.flash_kernel is not None or tr.framework != "megatron" or kernels is None:
        return tr.flash_kernel
    if tr.attention_kernel != "flash":
        return None
    capability = table_value(kernels, "compute_capability")
    measured = table_value(kernels, "attention", {})
    if capability is not None and float(capability) >= HOPPER and "cudnn" in measured:
        return "cudnn"
    return None


def resolved_training(s: Scenario) -> Training:
    """`training` with the framework's attention kernel filled in where it is left out."""
    kernel = resolved_flash_kernel(s)
    if kernel == s.training.flash_kernel:
        return s.training
    return s.training.model_copy(update={"flash_kernel": kernel})
