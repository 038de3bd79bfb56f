"""Review 2026-12-07 (n): a new user's pass over what landed after 0.23.0 (TP beyond the KV
heads, Megatron's selective recompute and the log-sum-exp, DeepSpeed ZeRO++, DeepSpeed's
gradient buckets, `plan` collapsing unread prefetch depths; docs/review-2026-12-07-n.md).
Each test fails on the tree before its fix; expected values are worked by hand in each."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from engine_helpers import merge, scenario

from tiersim.config.kv_head_split import tensor_parallel_code
from tiersim.config.zeropp import zeropp_notes
from tiersim.frameworks.write_deepspeed import write_deepspeed
from tiersim.state.inventory import build_inventory
from tiersim.state.resolved import resolve

ROOT = Path(__file__).resolve().parent.parent

GPT2_ZERO3 = {
    "name": "n",
    "model": {"preset": "gpt2"},
    "training": {
        "framework": "deepspeed",
        "micro_batch_size": 1,
        "seq_len": 1024,
        "optimizer": "adamw",
        "precision": {
            "weights": "bf16",
            "gradients": "bf16",
            "master": "fp32",
            "optimizer": "fp32",
        },
    },
    "parallel": {"data": 16, "zero_stage": 3},
    "hardware": {"preset": "dgx-h100"},
}


def test_an_hpz_size_of_0_is_off_as_deepspeed_takes_it():
    """`training.deepspeed.zero_hpz_partition_size: 0` was refused (E-RANGE, "greater than
    0"), though its own schema note says "0 also off", DeepSpeed's field is `Field(1, ge=0)`
    (zero/config.py) and `tiersim import` maps a DeepSpeed JSON's 0 to off."""
    off = scenario(merge(GPT2_ZERO3, {"training": {"deepspeed": {"zero_hpz_partition_size": 0}}}))
    # GPT-2 small's 124,439,808 bf16 weights over 16 ranks: ceil(/16) x 2 B = 15,554,976 B a
    # GPU, ZeRO-3's partition alone (no secondary partition)
    assert build_inventory(resolve(off)).per_gpu["weights"] == 15_554_976
    assert zeropp_notes(off) == []
    hpz_off = {"deepspeed": {"zero_hpz_partition_size": 0}}
    at_two = merge(GPT2_ZERO3, {"parallel": {"zero_stage": 2}, "training": hpz_off})
    assert zeropp_notes(scenario(at_two)) == []  # off: nothing to say of it at ZeRO-2
    zero = json.loads(write_deepspeed(off).text)["zero_optimization"]
    assert "zero_hpz_partition_size" not in zero  # off is DeepSpeed's default: left to it


def _table_rows() -> list[tuple[str, str]]:
    """(first cell, second cell) of docs/parallelism.md's 'KV heads under tensor parallelism'
    table."""
    text = (ROOT / "docs" / "parallelism.md").read_text()
    section = text.split("## KV heads under tensor parallelism", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ")][1:]
    return [tuple(c.strip() for c in row.strip("|").split("|")[:2]) for row in rows]


CODES = {
    "Megatron-Core": "megatron-core",
    "Megatron-DeepSpeed": "megatron-deepspeed",
    "DeepSpeed AutoTP training": "deepspeed-autotp",
    "transformers' own plan": "transformers",
    "torchtitan": "torchtitan",
}


LLAMA = {"name": "n", "model": {"preset": "llama-3-8b"}, "hardware": {"preset": "dgx-h100"}}


def test_the_kv_heads_table_names_every_framework_and_implementation():
    """docs/parallelism.md's table of who splits the layers had no row for `framework:
    megatron` with implementation huggingface or torchtitan, which tiersim accepts and refuses
    at tensor > kv_heads as transformers' or torchtitan's (its message says so)."""
    said: dict[tuple[str | None, str], str] = {}
    for cell, code in _table_rows():
        for clause in cell.split(";"):
            frameworks, implementations = clause.strip().rsplit(", ", 1)
            for fw in re.split(r", | or ", frameworks):
                for impl in implementations.split(" or "):
                    said[(None if fw == "not set" else fw, impl)] = CODES[code]
    for fw in (None, "megatron", "deepspeed", "fsdp"):
        for impl in ("megatron", "huggingface", "torchtitan"):
            training = {"framework": fw, "implementation": impl}
            s = scenario(merge(LLAMA, {"training": training}))
            assert said.get((fw, impl)) == tensor_parallel_code(s), (fw, impl)


if __name__ == "__main__":
    pytest.main([__file__])


def _link(nbytes: int, busy_s: float, groups: dict[str, int]) -> dict:
    return {"bytes": nbytes, "busy_s": busy_s, "bytes_by_direction": groups}


def test_qgz_nvlink_bytes_without_busy_time_are_explained():
    """`run` of GPT-2 on 16 GPUs with `zero_quantized_gradients: true` printed an nvlink row
    of 109.91 MB with 0 s busy and 0.0 % in flight, and no line saying why: qgZ's intra-node
    all-to-alls are inside the gradient reduction's network flow, their NVLink bytes added
    after the run (docs/link-bytes.md). The figures are that run's report."""
    from tiersim.report.text import PRICED_NOTE, priced_outside_flows

    links = {
        "network": _link(780_619_640, 1.95e-3, {"data": 780_619_640}),
        "pcie": _link(0, 0, {}),
        "nvlink": _link(109_911_767, 0, {"data": 109_911_767}),
    }
    assert priced_outside_flows(links)
    assert "qgZ" in PRICED_NOTE
    links["nvlink"] = _link(0, 0, {})  # no qgZ: nothing outside the flows
    assert not priced_outside_flows(links)


def test_the_inventory_note_says_hpz_secondary_partition():
    """`inventory` with `zero_hpz_partition_size: 8` printed GPT-2's weights as 46.66 MB a GPU
    of 248.88 MB and said only "ZeRO-sharded over data 16" (15.55 MB): nothing said where the
    other 31.11 MB came from."""
    from tiersim.report.inventory_note import split_note

    hpz = scenario(merge(GPT2_ZERO3, {"training": {"deepspeed": {"zero_hpz_partition_size": 8}}}))
    inv = build_inventory(resolve(hpz))
    # 124,439,808 x 2 B = 248,879,616 B of bf16 weights: ceil(/16) = 15,554,976 B and the
    # secondary partition ceil(/8) = 31,109,952 B (31.11 MB)
    assert inv.per_gpu["weights"] == 15_554_976 + 31_109_952
    assert "secondary partition over 8 ranks, weights / 8 (31.11 MB)" in split_note(hpz, inv)
    plain = scenario(GPT2_ZERO3)
    assert "secondary" not in split_note(plain, build_inventory(resolve(plain)))
