"""DeepSpeed ZeRO-1 with its CPU optimizer keeps the 16-bit gradients whole on the GPU through
the accumulation window and copies only the rank's partition to the host, as fp32, once a step
(state/zero1_offload.py, with the lines of stage_1_and_2.py and engine.py it follows; review
(k), "Found, not fixed", second row; issue 38).

By hand, from that source, for a 1.2e9-parameter model (bf16 weights and gradients, fp32 master
and Adam moments) over data 4, 3 micro-batches, on dgx-h100:
- no reduce and no copy between micro-batches (`process_gradients` reduces only with
  `partition_gradients or overlap_comm`; the engine calls `reduce_gradients` at the boundary
  alone): autograd accumulates the whole gradients on the GPU, 2 x 1.2e9 = 2.4e9 B, held
  there like ZeRO-1's without offload (all step);
- at the boundary the partition's slice, 1.2e9 / 4 = 3e8 values, goes to the host as fp32
  (`async_inplace_copy_grad_to_fp32_buffer_from_gpu`): 4 x 3e8 = 1.2e9 B down PCIe, once;
  after the CPU update the bf16 partition of the weights comes back: 2 x 3e8 = 6e8 B up;
- the host holds the partition: 2 x 3e8 = 6e8 B of gradients at the stored precision and, at
  the boundary, the fp32 copy's 2 B a value more (6e8 B), as tiersim counts ZeRO-2's.
Before the fix tiersim held 2.4e9 B on the host and moved 2.4e9 + 2.4e9 + 4.8e9 = 9.6e9 B down
and 2 x 2.4e9 + 6e8 = 5.4e9 B up: every micro-batch's whole gradients, out and read back.
"""

import pytest
import yaml

from tiersim.config.load import load_scenario
from tiersim.runner import simulate

P, DATA = 1_200_000_000, 4
PART = P // DATA  # 3e8 values of the rank's partition
SCENARIO = {
    "name": "z1cpu",
    "model": {"parameters": 1.2e9, "layers": 4},
    "training": {
        "micro_batch_size": 1,
        "grad_accumulation": 3,
        "seq_len": 1024,
        "framework": "deepspeed",
    },
    "parallel": {"data": DATA, "zero_stage": 1},
    "placement": {
        "gradients": "dram",
        "master": "dram",
        "optimizer": "dram",
        "optimizer_compute": "cpu",
    },
    "hardware": {"preset": "dgx-h100"},
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The ZeRO-1 run and its ZeRO-2 twin, simulated once."""
    out = {}
    for stage in (1, 2):
        path = tmp_path_factory.mktemp(f"z{stage}") / "s.yaml"
        raw = {**SCENARIO, "parallel": {"data": DATA, "zero_stage": stage}}
        path.write_text(yaml.safe_dump(raw, sort_keys=False))
        out[stage] = simulate(load_scenario(path).scenario)
    return out


def test_zero1_inventory_puts_the_partition_on_the_host_and_the_whole_on_the_gpu(
    cli_json, cli, write
):
    path = write(SCENARIO)
    report = cli_json(path)
    host = report["host_memory_timeline"]["peak_parts"]
    assert host["resident gradients"] == 2 * PART  # 6e8 B, not the whole 2.4e9
    assert host["fp32 gradients beyond the 16-bit ones (accumulation boundary)"] == 2 * PART
    gpu = report["memory_timeline"]["peak_parts"]
    assert gpu["resident gradients"] == 2 * P  # 2.4e9 B, accumulated on the GPU
    assert "unsharded gradients (before reduce-scatter)" not in gpu  # nothing scattered
    code, out, err = cli("inventory", path)
    assert code == 0, err
    assert "ZeRO 1;" in out.splitlines()[0]  # ZeRO-1 shards no gradient in GPU memory
    note = next(x for x in out.splitlines() if x.startswith("  gradients (DeepSpeed ZeRO-1"))
    assert "the host holds the rank's partition (600.00 MB)" in note
    assert "the whole 16-bit gradients (2.40 GB, its row 'gradients (GPU)', in the total" in note


def test_zero1_moves_the_fp32_partition_once_a_step_and_reads_nothing_back(runs):
    r = runs[1]
    assert r.links["pcie"].bytes_by_direction == {
        "hbm->dram": 4 * PART,  # the fp32 partition at the boundary: 1.2e9 B
        "dram->hbm": 2 * PART,  # the updated bf16 weights' partition: 6e8 B
    }
    assert r.tiers["dram"].written_by_class == {"gradients": 4 * PART}
    assert r.tiers["dram"].read_by_class == {"weights": 2 * PART}
    # the engine's GPU memory: weights and gradients whole (2 x 2.4e9) beside the workspace
    # (training.workspace's default 64 MiB), resident all step
    assert r.tiers["hbm"].resident_bytes == 2 * 2 * P + 64 * 2**20
    # the host: master (4 B) + two moments (8 B) of the partition and its bf16 gradients,
    # then the fp32 copy's 2 B more at the boundary
    assert r.tiers["dram"].resident_bytes == (4 + 8 + 2) * PART
    assert r.tiers["dram"].peak_bytes == (4 + 8 + 2 + 2) * PART


def test_zero2_still_moves_its_partition_every_micro_batch(runs):
    """The contrast, unchanged: ZeRO-2 reduce-scatters in each backward and DeepSpeed copies
    the partition out every micro-batch, reading the host's sum back from the second
    (`copy_grads_in_partition` with `micro_step_id > 0 or not boundary`): 6e8 + 6e8 B out,
    then 1.2e9 B of fp32 at the boundary; 6e8 + 6e8 B read back, and the weights' 6e8 B."""
    assert runs[2].links["pcie"].bytes_by_direction == {
        "hbm->dram": 2 * PART + 2 * PART + 4 * PART,
        "dram->hbm": 2 * PART + 2 * PART + 2 * PART,
    }
    assert runs[1].time_s < runs[2].time_s  # nothing on the compute stream until the boundary
