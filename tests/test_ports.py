"""Tier ports in the run report: what crosses each, and the one that binds (issue 21).

The default scenario homes Llama-2-7B's fp32 master weights and Adam moments on HBF and
updates them on the GPU: every step they are read into HBM and written back, 12 bytes per
parameter each way, through HBF's 50 GB/s write port (the preset's assumption) under a
1.6 TB/s HBF link.
"""

import json

from conftest import SCENARIOS

PARAMETERS = 6_738_415_616  # Llama-2-7B, exact (Touvron et al. 2023; tests/test_model_counts)
WRITTEN = PARAMETERS * (4 + 8)  # fp32 master + two fp32 moments = 80,860,987,392 B
HBF_WRITE = 50e9


def test_hbf_write_port_binds_the_default_step(cli, tmp_path):
    code, out, err = cli("run", SCENARIOS / "default.yaml", "--format", "json", "--out", tmp_path)
    assert code == 0, err
    report = json.loads(out)
    step_s = report["step"]["time_s"]
    write = report["tiers"]["hbf"]["ports"]["write"]
    assert write["bandwidth"] == HBF_WRITE
    assert write["bytes_per_step"] == WRITTEN
    assert write["full_rate_s"] == WRITTEN / HBF_WRITE  # 1.617 s
    assert abs(write["bandwidth_utilization"] - WRITTEN / HBF_WRITE / step_s) < 1e-12
    link = report["links"]["hbf"]["bandwidth_utilization_by_direction"]["hbm->hbf"]
    assert abs(link - WRITTEN / 1.6e12 / step_s) < 1e-12  # the link is 32 x wider
    assert report["step"]["bottleneck"] == {
        "resource": "hbf write port",
        "kind": "port",
        "bandwidth_utilization": write["bandwidth_utilization"],
    }


def test_port_table_names_the_bottleneck(cli, tmp_path):
    code, out, err = cli("run", SCENARIOS / "default.yaml", "--out", tmp_path)
    assert code == 0, err
    assert "hbf write    50.00 GB/s    80.86 GB       1.617 s" in out
    step_s = json.loads((tmp_path / "report.json").read_text())["step"]["time_s"]
    share = 100 * WRITTEN / HBF_WRITE / step_s  # 1.617 s of an 8.9 s step: about 18 %
    assert f"busiest (step.bottleneck): the hbf write port, {share:.1f} % of its bandwidth" in out
