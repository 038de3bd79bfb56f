"""What the GPU holds outside PyTorch's allocator over the step, beside the memory timeline
(state/step_memory.py): the CUDA context, NCCL's buffers, Transformer Engine's userbuffers."""

from __future__ import annotations

from tiersim.state.resolved import Resolved
from tiersim.state.timeline import Outside
from tiersim.state.userbuffers import UB_NAME, userbuffer_bytes, userbuffer_source

# Outside the allocator (not in torch.cuda.memory_reserved): the CUDA context, 723 MiB on the
# first CUDA call (PyTorch forums, "What is the reason for pytorch's GPU memory floor?", measured
# with nvidia-smi); CUDA >= 11.7's lazy module loading lowers it: an upper figure.
CUDA_CONTEXT_BYTES = 723 * 2**20
# NCCL: NCCL_BUFFSIZE, 4 MiB by default (NCCL environment variables, docs.nvidia.com), per
# channel and peer of a communicator's ring; counted for the send and receive peer of each
# channel, NCCL_MIN_NCHANNELS..MAX up to 32 on NVLink: taken as 16 channels here, an estimate
NCCL_BUFFSIZE = 4 * 2**20
NCCL_CHANNELS = 16
NCCL_PEERS = 2


def nccl_communicators(r: Resolved) -> int:
    """Communicators a GPU joins: one per parallel dimension of more than one rank."""
    par = r.execution.parallel
    return sum(1 for n in (par.data, par.tensor, par.pipeline, par.expert) if n > 1)


def outside_terms(r: Resolved) -> list[Outside]:
    out = [Outside("CUDA context", CUDA_CONTEXT_BYTES, "PyTorch forums: 723 MiB (nvidia-smi)")]
    comms = nccl_communicators(r)
    if comms:
        nbytes = comms * NCCL_CHANNELS * NCCL_PEERS * NCCL_BUFFSIZE
        source = f"{comms} communicators x 16 channels x 2 peers x NCCL_BUFFSIZE 4 MiB"
        out.append(Outside("NCCL buffers", nbytes, source))
    if ub := userbuffer_bytes(r):
        out.append(Outside(UB_NAME, ub, userbuffer_source(r)))
    return out
