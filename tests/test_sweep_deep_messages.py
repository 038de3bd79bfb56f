"""A swept (or `set:`) mapping whose problem is a key under it names that key: the message was
"grid.hardware.tiers.hbf: value {...}: required key is missing", without saying which."""

from __future__ import annotations

from test_sweep_spec import TINY, write_sweep

NEW_TIER = {"write_bandwidth": "10 GB/s"}  # a whole tier, without its kind and capacity
# dgx-h100 has no HBF: the base's own tier is the whole of it, which the swept value replaces
HBF = {"kind": "flash", "capacity": "4 TB", "read_bandwidth": "1.6 TB/s", "latency": "15 us"}
BASE = {**TINY, "hardware": {"preset": "dgx-h100", "tiers": {"hbf": {**HBF, **NEW_TIER}}}}


def test_a_swept_mapping_names_the_key_under_it(tmp_path, cli):
    path = write_sweep(tmp_path, {"grid": {"hardware.tiers.hbf": [NEW_TIER]}}, BASE)
    code, _, err = cli("sweep", path, "--out", tmp_path / "out", "--no-plots")
    assert code == 2 and not (tmp_path / "out").exists()
    said = f"{path}: grid.hardware.tiers.hbf: value {{'write_bandwidth': '10 GB/s'}}: "
    assert f"{said}kind: required key is missing" in err
    assert f"{said}capacity: required key is missing" in err


def test_a_set_mapping_names_the_key_under_it(tmp_path, cli):
    sweep = {"set": {"hardware.tiers.hbf": NEW_TIER}, "grid": {"parallel.data": [1, 2]}}
    path = write_sweep(tmp_path, sweep, BASE)
    code, _, err = cli("validate", path)
    assert code == 2
    said = f"{path}: set.hardware.tiers.hbf: value {{'write_bandwidth': '10 GB/s'}}: "
    assert f"{said}kind: required key is missing" in err
    assert f"{said}capacity: required key is missing" in err
