"""DeepSpeed's AutoTP beside ZeRO-3 (review 2026-12-07-i: imported with no word, DeepSpeed's
tutorial listing ZeRO 0-2). Read in DeepSpeed's PyPI releases: 0.19.3's engine.py
`_configure_tensor_parallel_states` asserts `zero_optimization_stage() <= 2` ("the
compatibility between 'autotp' and 'zero_stage = 3' has not been validated"); 0.19.4 and 0.19.8
have no such assertion and say "AutoTP + ZeRO stage 3 is supported for both inference and
training". tiersim reads DeepSpeed as its latest: kept, the release boundary said. (The ZeRO++
keys beside them in the review's probes are modelled now: tests/test_zeropp.py.)"""

from __future__ import annotations

import json

from tiersim.frameworks.assemble import ImportOptions, import_configs


def _import(tmp_path, stage: int):
    cfg = {"train_micro_batch_size_per_gpu": 1, "tensor_parallel": {"autotp_size": 2},
           "zero_optimization": {"stage": stage}}  # fmt: skip
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(cfg))
    return import_configs([path], ImportOptions(gpus=8, overrides=("model.preset=gpt2",)))


def test_autotp_at_zero3_is_kept_and_the_release_boundary_said(tmp_path):
    imp = _import(tmp_path, 3)
    p = imp.loaded.scenario.parallel
    # 8 GPUs / AutoTP 2 = 4 data-parallel ranks, ZeRO-3 over them
    assert (p.tensor, p.data, p.zero_stage) == (2, 4, 3)
    notes = "\n".join(imp.note_lines())
    assert "tensor_parallel.autotp_size: beside zero_optimization.stage 3" in notes
    assert "DeepSpeed up to 0.19.3 refuses it" in notes


def test_autotp_below_zero3_says_nothing_of_it(tmp_path):
    notes = "\n".join(_import(tmp_path, 2).note_lines())
    assert "autotp_size" not in notes
