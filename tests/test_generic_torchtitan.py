"""`training.implementation: torchtitan` on a generic model (a parameter count and its layers'
bytes, no layer shapes): `validate` called it valid, then `run` and `inventory` ended in a
Python traceback (an assert in torchtitan's chunked loss, which needs a transformer's logits).
A generic model has no logits to chunk: the step is the generic model's, as under the other
implementations."""

from __future__ import annotations

import json

from conftest import SCENARIOS

SEED = SCENARIOS / "seed-1b-adam.yaml"  # 1e9 parameters, 24 layers of 200 MB activations


def test_torchtitan_on_a_generic_model_runs_and_counts_the_generic_state(cli, tmp_path):
    code, out, err = cli(
        "run",
        SEED,
        "--set",
        "training.implementation=torchtitan",
        "--format",
        "json",
        "--out",
        tmp_path / "r",
    )
    assert code == 0, err
    assert "Traceback" not in err
    report = json.JSONDecoder().raw_decode(out)[0]
    # by hand, 1e9 parameters: bf16 weights 2 B and gradients 2 B, fp32 master 4 B, Adam's
    # two fp32 moments 8 B; activations 24 x 200 MB; the workspace PyTorch's 64 MiB
    assert report["memory_timeline"]["peak_parts"] == {
        "resident optimizer": 8_000_000_000,
        "saved activations": 24 * 200_000_000,
        "resident master": 4_000_000_000,
        "resident weights": 2_000_000_000,
        "resident gradients": 2_000_000_000,
        "resident workspace": 64 * 2**20,
    }
    code, _, err = cli("inventory", SEED, "--set", "training.implementation=torchtitan")
    assert code == 0 and "Traceback" not in err
