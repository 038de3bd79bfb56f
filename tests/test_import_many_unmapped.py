"""`tiersim import` of a config with many keys tiersim has no setting for: the first 30
(MAX_LISTED, as the scenario loader lists unknown keys) are noted, then one note counts the
rest (a DeepSpeed JSON of 20,000 unknown keys printed 20,000 notes); other notes all kept."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

from tiersim.cli import main

HF = Path(__file__).resolve().parent / "fixtures" / "llama-2-7b.config.json"
UNMAPPED = "not mapped (tiersim has no setting for it) [W-IMPORT-UNMAPPED]"


def test_unmapped_settings_past_30_are_counted_in_one_note(tmp_path):
    config = {"train_micro_batch_size_per_gpu": 1} | {f"k{i}": i for i in range(100)}
    offload = {"device": "nvme", "nvme_path": "/n"}  # at stage 3, where DeepSpeed runs it
    config["zero_optimization"] = {"stage": 3, "offload_optimizer": offload}
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(config))
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["import", str(path), "--hf-config", str(HF), "--gpus", "8"])
    assert code == 0, err.getvalue()
    # k0..k29 listed; the nvme_path note (not an unmapped one) kept; k30..k99: 70 counted
    expected = [f"note: {path}: k{i}: {i}: {UNMAPPED}" for i in range(30)]
    expected.append(
        f"note: {path}: zero_optimization.offload_optimizer.nvme_path: /n: taken as the "
        "hardware's nvme tier (the drive serving this GPU) [W-IMPORT-ASSUMED]"
    )
    expected.append(  # nor, without "auto" values, its model code (review 2026-12-07-m)
        f'note: {path}: (no "auto" values): training.implementation: megatron, the '
        "scenario's default: Megatron-LM's layers, whose eager attention stores the s x s "
        'softmax scores; a DeepSpeed config without "auto" names no model code; --hf-config '
        "gives the model's shapes, not the code that runs it (expected --set "
        "training.implementation=huggingface for a transformers model as the HF Trainer or "
        "accelerate runs it, attention sdpa; or torchtitan) [W-IMPORT-ASSUMED]"
    )
    expected.append(  # a DeepSpeed config has no sequence length (review 2026-12-07-i)
        "note: training.seq_len: no config gives it (a DeepSpeed or Accelerate config has no "
        "sequence length): the scenario's default, the model's max_positions, else 2048 "
        "(expected --set training.seq_len=N, the length the run trains at) [W-IMPORT-ASSUMED]"
    )
    expected.append(
        f"note: {path}: ... and 70 more settings tiersim has no key for, from k30 on "
        "(the first 30 are listed) [W-IMPORT-UNMAPPED]"
    )
    assert err.getvalue().splitlines() == expected
    # the scenario's header says the same notes, each file named by its name alone
    header = out.getvalue().splitlines()[2:36]
    named = [line.removeprefix("note: ").replace(str(path), "ds.json") for line in expected]
    assert header == [f"#   {line}" for line in named]
