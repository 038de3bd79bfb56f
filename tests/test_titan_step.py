"""The whole step under `training.implementation: torchtitan` against PyTorch on the CPU: the
module written op for op as torchtitan 0.3.0's Llama 3 (tests/test_titan_activations.py:
nn.RMSNorm, a fused q/k/v projection, rotary positions as a complex multiply by the table's rows
at the positions, K and V at their kv heads, SwiGLU, the loss over fp32 logits in one piece,
summed and divided by the count of tokens), trained one step with torch.optim.AdamW and
recorded with the profiler's memory events (groundtruth/step_peaks.py), beside the memory
timeline built for the CPU: the step's peak within 3 % and in the same phase. Full recompute
wraps each block in PyTorch's non-reentrant checkpoint, as torchtitan's activation
checkpointing does.

Full recompute in bf16 peaks where the CPU's bf16 GEMMs run, so its GEMMs' workspace counts
(groundtruth/cpu_gemm_scratchpad.py): where the CPU keeps them off oneDNN they take none (0 B,
tests/test_cpu_gemm_workspace.py) and those cells are held to 3 % as the rest; where it sends
them to oneDNN (AVX-512, AMX), whose scratchpad inside the layers the timeline does not count,
they are skipped with that reason. Without recompute the bf16 step peaks in the head's
backward: on AVX-512 BF16 cores without AMX inside its weight-gradient GEMM, whose scratchpad
the timeline counts there (state/loss_memory.py `head_gemm_workspaces`: 87,168 B for d logitsᵀ
[256, 32] x x [32, 64], A's copy included, state/onednn_brgemm.py). Full bf16 measured on
AMX cores (the module before it followed 0.3.0): -3.15 % (4 kv heads) and -3.35 % (2), the
step's peak in layer 1's backward beside transient workspaces of 21,504 B and 13,440 B
(docs/issue38-status.md). tests/test_titan_real.py records torchtitan's own model where
torchtitan is installed."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import test_titan_activations as titan  # noqa: E402
from torch.profiler import ProfilerActivity, record_function  # noqa: E402
from torch.utils.checkpoint import checkpoint  # noqa: E402

from tiersim.groundtruth.cpu_gemm_scratchpad import onednn_takes  # noqa: E402
from tiersim.groundtruth.quiet_profiler import quiet_profile  # noqa: E402
from tiersim.groundtruth.step_peaks import StepPeaks, measured_peaks  # noqa: E402
from tiersim.groundtruth.step_timeline import predicted_peaks, predicted_timeline  # noqa: E402

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def _stored(tensors) -> int:
    storages = [t.untyped_storage() for t in tensors]
    return sum({st.data_ptr(): st.nbytes() for st in storages}.values())


def _checkpointed(net) -> None:
    """Each block recomputed in its backward (torch.utils.checkpoint, non-reentrant)."""
    for block in net.layers:
        forward = block.forward
        block.forward = lambda x, cis, pos, f=forward: checkpoint(
            f, x, cis, pos, use_reentrant=False
        )


def recorded_step(kv: int, dtype: str, recompute: str) -> StepPeaks:
    """A warm-up step, then the recorded one (zero_grad(set_to_none=False), forward with the
    loss, backward, AdamW's step), on one thread."""
    torch.manual_seed(0)
    net = titan.Model(kv)
    for p in net.parameters():
        p.data = p.data.to(DTYPES[dtype])
    if recompute == "full":
        _checkpointed(net)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-4)
    ids, labels = torch.randint(0, titan.V, (2, 1, titan.S))

    def step(recorded: bool) -> None:
        opt.zero_grad(set_to_none=False)

        def run(name, fn):
            if not recorded:
                return fn()
            with record_function(name):
                return fn()

        loss = run("forward", lambda: net(ids, labels))
        run("backward", loss.backward)
        run("optimizer", opt.step)

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a 16-bit GEMM's CPU workspace grows with its threads
    try:
        step(False)
        params = list(net.parameters())
        state = [v for st in opt.state.values() for k, v in st.items() if k != "step"]
        base = _stored(params) + _stored([p.grad for p in params]) + _stored(state)
        base += _stored(list(net.buffers()))  # the rotary table, outside the step's allocations
        with quiet_profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            step(True)
    finally:
        torch.set_num_threads(threads)
    return measured_peaks(prof, base)


CASES = [(4, "fp32", "none"), (2, "fp32", "none"), (4, "bf16", "none"), (2, "bf16", "none")]
CASES += [(4, "fp32", "full"), (2, "fp32", "full"), (4, "bf16", "full"), (2, "bf16", "full")]


@pytest.mark.parametrize(("kv", "dtype", "recompute"), CASES, ids=lambda v: str(v))
def test_torchtitan_step_peak_within_3_percent_of_pytorch(kv, dtype, recompute):
    """As the module follows torchtitan 0.3.0 (AVX2 CPU): recompute none -0.12 % to -0.46 %
    (the loss's backward), full fp32 -1.38 % and -1.48 % (layer 1's backward); full bf16 on a
    CPU without oneDNN's bf16 route -1.37 % and -1.20 %, predicted at the loss's backward. On
    an Intel Xeon with AVX-512 BF16 and no AMX (2026-12-08) bf16 without recompute -0.12 % (4
    kv heads) and -0.13 % (2), in the head's weight-gradient GEMM; -3.13 % and -3.32 % before
    its scratchpad was counted."""
    if dtype == "bf16" and recompute == "full" and onednn_takes(torch.bfloat16):
        pytest.skip("its layers' bf16 GEMMs take oneDNN's scratchpad here, not counted")
    s = titan.titan(kv, dtype, seq_len=titan.S, workspace="0 B", recompute=recompute)
    measured = recorded_step(kv, dtype, recompute)
    assert measured.left_bytes == 0, measured  # every allocation the step made, seen freed
    t = predicted_timeline(s)
    predicted = predicted_peaks(t)
    assert abs(predicted.peak_bytes / measured.peak_bytes - 1) <= 0.03, (measured, predicted)
    assert predicted.peak_phase == measured.peak_phase == "backward"
    moment = "backward: layer 1" if (recompute, dtype) == ("full", "fp32") else "backward: loss"
    assert t.peak_event.moment == moment
