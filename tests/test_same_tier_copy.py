"""Under `ordered` sharing a copy within one tier (a checkpoint to the tier a class is homed
on) is ordered on that tier's ports with the transfers through them (tiersim/engine/graph.py
`_link_order`): it crosses no link, so ordering on links alone let it run beside a transfer
into the same tier through a link, each at the whole write port (docs/invariants.md: seed 53
case 67 of benchmarks/explore_wide.py, exit 70 with tiers.hbf.ports.write 1.088)."""

from invariant_checks import MODEL

from tiersim import api

# the minimal scenario: the fp32 master homed on HBF, a blocking checkpoint to HBF
MINIMAL = {
    "name": "same-tier-copy",
    "model": MODEL,
    "training": {
        "seq_len": 256,
        "micro_batch_size": 1,
        "grad_accumulation": 1,
        "optimizer": "adamw",
    },
    "parallel": {"data": 1},
    "placement": {"master": "hbf"},
    "hardware": {"preset": "h200-hbf"},
    "checkpoint": {"every_steps": 2, "target": "hbf", "mode": "blocking"},
    "simulation": {"link_sharing": "ordered"},
}

# MODEL's parameters: embeddings and output 2 x 1,024 x 256 = 524,288; each of 4 layers
# 4 x 256^2 (attention) + 3 x 256 x 1,024 (gated MLP) + 2 x 256 (norms) = 1,049,088;
# the final norm 256: 524,288 + 4 x 1,049,088 + 256 = 4,720,896
PARAMS = 4_720_896
# the checkpoint: bf16 weights (2 B), fp32 master (4 B), Adam's two fp32 moments (8 B)
CHECKPOINT_BYTES = PARAMS * (2 + 4 + 8)  # 66,092,544 B, all written into HBF
HBF_WRITE = 50e9  # B/s, the h200-hbf preset's HBF write_bandwidth (an assumption it states)


def test_a_checkpoint_into_its_homes_tier_takes_that_tiers_write_port_in_turn():
    report = api.run(api.build(MINIMAL)).report  # exit 70 (port 1.081) before
    ckpt = report["checkpoint"]
    assert ckpt["bytes"] == CHECKPOINT_BYTES
    # blocking: the steps wait for every byte to land, and every byte crosses HBF's write
    # port, so the write lasts at least 1,321.85 us (974.18 us before: the master's copy
    # within HBF ran beside the HBM -> HBF copies, each at 50 GB/s)
    assert ckpt["write_s"] >= CHECKPOINT_BYTES / HBF_WRITE
    assert ckpt["stall_s"] >= CHECKPOINT_BYTES / HBF_WRITE
    assert report["tiers"]["hbf"]["ports"]["write"]["bandwidth_utilization"] <= 1.0
