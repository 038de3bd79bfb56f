"""Layer-level selective checkpointing, torchtitan's `selective_ac_option = N` (a whole number;
`training.recompute: full` with `training.recompute_every: N`): every N-th transformer block of
a rank is checkpointed whole (full recompute), the others keep all they save.

torchtitan's `_apply_layer_sac` (torchtitan/distributed/activation_checkpoint.py, pytorch/
torchtitan commit cfb9326515) counts the blocks it wraps in a module-global counter and wraps
block c (from 1) where `not ac_freq or c % ac_freq == 0`: of a rank's L blocks, floor(L / N)
are checkpointed. tiersim gives every layer the mean of the two policies, a share 1/N of full
recompute's bytes and rerun and (N - 1)/N of no recompute's: the stage's totals (its kept
bytes, its recompute time, its collectives) are exact where N divides the rank's layers (else
L/N layers are counted where torchtitan checkpoints floor(L/N)); a layer's own figures are the
mean, not alternately the one and the other.
"""

from __future__ import annotations


def checkpointed_share(every: int) -> float:
    """The share of a rank's layers checkpointed under full recompute: 1/N (1: all of them)."""
    return 1.0 / every


def mixed(full: float, none: float, every: int) -> float:
    """A layer's mean figure: full recompute's on 1/N of the layers, none's on the rest."""
    if every == 1:
        return full
    share = checkpointed_share(every)
    return share * full + (1.0 - share) * none
