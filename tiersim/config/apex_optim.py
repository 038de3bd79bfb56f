"""`training.apex`: the two settings of apex's DistributedFusedAdam that size what one GPU
holds under `training.distributed_optimizer: apex`, as NeMo 1.x passes them from its
`optim:` config (NVIDIA/NeMo-Framework-Launcher launcher_scripts/conf/training/llama/
llama3_8b.yaml at 157ea78b: `bucket_cap_mb: 125`, `contiguous_param_buffer: true`;
docs/nemo-memory.md, "apex's contiguous param buffer"). Left out, apex's own defaults:
`bucket_cap_mb` 100 and no param buffer (apex/contrib/optimizers/distributed_fused_adam.py,
`DistributedFusedAdam.__init__`'s docstring: "bucket_cap_mb ... (default: 100)",
"contiguous_param_buffer ... (default: False)")."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from tiersim.config.fields import Strict

# apex reads it as MiB (its `default_shard_size = int(2**20 * bucket_cap_mb / dtype bytes /
# ranks)`); a float, as apex takes one; bounded far above any real bucket (1 TiB)
BucketCapMb = Annotated[float, Field(gt=0, le=2**20)]


class ApexOptim(Strict):
    """`training.apex`: apex DistributedFusedAdam's bucket size and param buffer (NeMo's
    `optim.bucket_cap_mb` and `optim.contiguous_param_buffer`), counted only under
    `distributed_optimizer: apex` (state/apex_buckets.py)."""

    # MiB of gradients per bucket (apex's bucket_cap_mb); every bucket is this many MiB of the
    # optimizer's grad_sync_dtype split over the data x context ranks; null: apex's 100
    bucket_cap_mb: BucketCapMb | None = None
    # true: apex's init_param_buffer makes the 16-bit weights views of whole buckets in one
    # buffer per bucket dtype (their exact-size tensors freed); false: apex's default, none
    contiguous_param_buffer: bool = False
