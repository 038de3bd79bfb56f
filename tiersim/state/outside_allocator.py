"""What the GPU holds outside PyTorch's allocator over the step, beside the memory timeline
(state/step_memory.py): the CUDA context, NCCL's buffers, Transformer Engine's userbuffers."""

from __future__ import annotations

from tiersim.state.resolved import Resolved
from tiersim.state.timeline import Outside
from tiersim.state.userbuffers import UB_NAME, userbuffer_bytes, userbuffer_source

# Outside the allocator (not in torch.cuda.memory_reserved): the CUDA context, 723 MiB as
# nvidia-smi shows it after the first CUDA call (PyTorch forums, "What is the reason for
# pytorch's GPU memory floor?"). Under lazy module loading (PyTorch's default since 1.13,
# pytorch/pytorch PR #86509; CUDA's own on Linux since 12.2) the context grows with the
# modules a process runs; an H100 80GB HBM3 after a PyTorch 2.5.1+cu121 training step (one
# GPU, no NCCL, no Transformer Engine) held 0.67 GiB outside PyTorch's pool (its OOM message:
# 79.11 GiB total, 1.69 GiB free, 76.53 GiB allocated, 222.82 MiB reserved unallocated;
# docs/nemo-memory.md): 723 MiB stands, within 5 % of it, for a stack that loads more.
CUDA_CONTEXT_BYTES = 723 * 2**20
# NCCL: a communicator's ring channel holds on each GPU a send and a receive connection; over
# P2P (NVLink or PCIe) each side is its header (ncclSendMem / ncclRecvMem, MEM_ALIGN 4 KiB)
# and protocol buffers, aligned to CUDA_IPC_MIN 2 MiB (src/transport/p2p.cc `p2pSendSetup`,
# `p2pRecvSetup`: `ALIGN_SIZE(size, CUDA_IPC_MIN)`): with P2P read (NVLink, Ampere and
# later) the sender keeps SIMPLE's NCCL_BUFFSIZE 4 MiB, the receiver LL's 8 x 512 x 8 x 16 =
# 524,288 B and LL128's 120 x 640 x 8 x 8 = 4,915,200 B (src/init.cc `DEFAULT_LL_BUFFSIZE`,
# `DEFAULT_LL128_BUFFSIZE`, `DEFAULT_BUFFSIZE`): 6 MiB + 6 MiB (without read the receiver
# keeps all three, 10 MiB, the sender its header, 2 MiB: the same 12 MiB). Tree connections
# to other peers, NVLS (off under NeMo's launcher, NCCL_NVLS_ENABLE=0) and send/recv buffers
# are not counted. Channels: the topology search's at run time, taken as 16 (an estimate:
# NCCL logs show 16 on H800, 24 on A100 NVSwitch at NCCL 2.20.5).
CUDA_IPC_MIN = 2 * 2**20
NCCL_HEADER = 4096
NCCL_BUFFSIZE = 4 * 2**20
NCCL_LL = 8 * 512 * 8 * 16
NCCL_LL128 = 120 * 640 * 8 * 8
NCCL_CHANNELS = 16


def _ipc_aligned(nbytes: int) -> int:
    return CUDA_IPC_MIN * -(-nbytes // CUDA_IPC_MIN)


# a ring channel's send (SIMPLE, read from it) and receive (LL, LL128) sides on one GPU
NCCL_CHANNEL_BYTES = _ipc_aligned(NCCL_HEADER + NCCL_BUFFSIZE) + _ipc_aligned(
    NCCL_HEADER + NCCL_LL + NCCL_LL128
)


def nccl_communicators(r: Resolved) -> int:
    """Communicators a GPU joins: one per parallel group of more than one rank. Under context
    parallelism the gradients are reduced over data x context ranks (Megatron-Core's
    `get_data_parallel_group(with_context_parallel=True)`, apex's group under NeMo) and the
    attention's K/V pass within the context group: two communicators."""
    par = r.execution.parallel
    groups = (par.data * par.context, par.context, par.tensor, par.pipeline, par.expert)
    return sum(1 for n in groups if n > 1)


def outside_terms(r: Resolved) -> list[Outside]:
    out = [Outside("CUDA context", CUDA_CONTEXT_BYTES, "PyTorch forums: 723 MiB (nvidia-smi)")]
    comms = nccl_communicators(r)
    if comms:
        nbytes = comms * NCCL_CHANNELS * NCCL_CHANNEL_BYTES
        source = f"{comms} communicators x 16 ring channels x 12 MiB (NCCL's p2p.cc)"
        out.append(Outside("NCCL buffers", nbytes, source))
    if ub := userbuffer_bytes(r):
        out.append(Outside(UB_NAME, ub, userbuffer_source(r)))
    return out
