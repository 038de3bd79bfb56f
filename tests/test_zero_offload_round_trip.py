"""ZeRO-Offload Fig. 8's 13B run moves what DeepSpeed's ZeRO-2 code of the paper's time moves
across PCIe, and the GPU waits for all of it (docs/validation.md: why the 12B and 13B runs stay
slow).

DeepSpeed (stage2.py, cpu_offload, overlap_comm off) per parameter and step of 128
micro-batches: micro-batch 0 copies its fp16 gradient out (2 B); 1 to 126 read the host's fp16
sum back (2 B), add and copy it out (2 B); 127 reads it back (2 B) and copies it out as fp32
(4 B); after the update the fp16 weights come back (2 B). Every layer's checkpoint (the fp16
layer input, micro-batch 4 x 1,024 tokens x hidden 4,096) goes out in forward and back before
the recompute (cpu_checkpointing). All of it on the compute stream.
"""

import pytest

from tiersim.config.load import load_scenario
from tiersim.runner import simulate
from tiersim.state.resolved import resolve
from tiersim.workload.work import build_workload

L, H, V, S, B, MB = 65, 4096, 50257, 1024, 4, 128  # Table 3's 13B shape, batch 512 = 4 x 128
PARAMS = L * (12 * H * H + 13 * H) + V * H + S * H + 2 * H  # GPT-2: layers, embeddings, norm
CHECKPOINTS = MB * L * B * S * H * 2  # one way, fp16, per step


def test_the_13b_run_moves_deepspeeds_round_trip_to_the_byte_and_waits_for_it():
    r = simulate(load_scenario("scenarios/published/ren2021-zero-offload-13b.yaml").scenario)
    out = (2 + 126 * 2 + 4) * PARAMS + CHECKPOINTS
    back = (127 * 2 + 2) * PARAMS + CHECKPOINTS
    assert PARAMS == 13_299_744_768
    pcie = r.links["pcie"]
    assert pcie.bytes_by_direction == {"hbm->dram": out, "dram->hbm": back}
    assert pcie.busy_s == pytest.approx(
        (out + back) / 12e9, rel=1e-12
    )  # one direction at a time, 12 GB/s
    assert r.overlap == 0.0
    assert pcie.busy_s <= r.exposed_transfer_s < pcie.busy_s + 1.0  # latencies only beyond it


def test_the_13b_runs_gradient_path_kernels_run_in_stream_at_hbm_speed():
    # The same code's GPU work per parameter (fp16 gradients): every micro-batch the gradient
    # is copied into the reduce bucket (read 2, write 2); from the second micro-batch the
    # read-back sum is added (read 4, write 2); at the boundary the norm in double (read 2,
    # write 8, read 8), the overflow check in float (read 2, write 4, read 4) and the fp32
    # cast (read 2, write 4). Each bucket reduce divides the whole reduce buffer in place:
    # 4.5 x 5e7 fp16 elements read and written (stage2.py backward() and average_tensor).
    # Reduces per micro-batch with the 5e7 bucket, each layer's tensors in reverse as
    # Megatron-LM v1's GPT-2 holds them (DeepSpeedExamples Megatron-LM/mpu/transformer.py:
    # query_key_value one [3h, h]; norms and biases 40,960 elements, the MLP's two 4096 x
    # 16384 = 67.1M, a bias, dense 16.8M, query_key_value's bias and its 3 x 4096^2 =
    # 50,331,648, more than the bucket alone): entering a layer with query_key_value in the
    # bucket, the first norm overflows it (1), the first MLP matrix (2), the second (3), the
    # bias after it (4), query_key_value after dense (5): 5 a layer; the first layer the
    # backward reaches enters empty: 4. The rest: the norm overflows (1), the positions
    # (4.2M) fit, the embedding (205.9M) overflows (2), the epilogue (3). 64 x 5 + 4 + 3 =
    # 327 (262 with q, k and v apart). On the compute stream: they add to the GPU's time at
    # V100 HBM 900 GB/s x 0.90.
    s = load_scenario("scenarios/published/ren2021-zero-offload-13b.yaml").scenario
    r = simulate(s)
    units = build_workload(resolve(s)).units
    kernels = MB * sum(u.forward_s + u.backward_s + u.recompute_s for u in units)
    per_param = 4 * MB + 6 * (MB - 1) + (18 + 10 + 6)
    division = MB * (64 * 5 + 4 + 3) * 2 * (45 * 5_000_000 * 2)
    bucket = (PARAMS * per_param + division) / (900e9 * 0.90)
    assert r.compute_s == pytest.approx(kernels + bucket, rel=1e-9)
    assert 67.5 < bucket < 68.5  # seconds a step, of about 1,800 (58-59.5 apart)
