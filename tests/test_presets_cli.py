"""`tiersim presets`: every shipped preset listed with its key figures."""

import json
from pathlib import Path

PRESETS = Path(__file__).resolve().parent.parent / "tiersim" / "presets"


def test_presets_lists_every_shipped_file(cli):
    code, out, err = cli("presets", "--format", "json")
    assert code == 0, err
    listed = json.loads(out)
    assert set(listed["models"]) == {p.stem for p in (PRESETS / "models").glob("*.yaml")}
    assert set(listed["hardware"]) == {p.stem for p in (PRESETS / "hardware").glob("*.yaml")}
    # Llama-2-7B: 6,738,415,616 parameters (the released checkpoint's count)
    assert listed["models"]["llama-2-7b"]["parameters"] == 6_738_415_616
    # GPT-2 small: 124,439,808 (Hugging Face gpt2, tied embeddings)
    assert listed["models"]["gpt2"]["parameters"] == 124_439_808
    hbf = listed["hardware"]["h200-hbf"]["tiers"]["hbf"]
    assert (hbf["capacity_bytes"], hbf["write_bandwidth"]) == (4e12, 50e9)  # the preset's file


def test_presets_table_has_units(cli):
    code, out, err = cli("presets")
    assert code == 0, err
    assert "llama-2-7b" in out and "6.74 B (6,738,415,616)" in out
    assert "h200-hbf          hbf  flash    4.00 TB    1.60 TB/s   50.00 GB/s" in out
    # the 16-bit tensor peak: H100 SXM 989 TFLOP/s bf16 dense; the V100 (no bf16) 125 fp16
    gpu_rows = {line.split()[0]: line for line in out.splitlines() if "TFLOP/s" in line}
    assert "989 TFLOP/s bf16" in gpu_rows["dgx-h100"]
    assert "125 TFLOP/s fp16" in gpu_rows["dgx2"]


def test_presets_give_the_network_in_the_node_and_across_nodes(cli):
    # h200-hbf: NVLink 4 at 450 GB/s per direction (run's `nvlink` link), and one 400 Gb/s
    # NIC per GPU, 50 GB/s: the table used to give only the second, as "network"
    code, out, err = cli("presets")
    assert code == 0, err
    assert "in node/dir  across nodes/dir" in out
    (row,) = [ln for ln in out.splitlines() if ln.startswith("h200-hbf ") and "H200" in ln]
    assert row.endswith("450.00 GB/s        50.00 GB/s")
    code, out, err = cli("presets", "--format", "json")
    h200 = json.loads(out)["hardware"]["h200-hbf"]
    assert (h200["intra_node_bandwidth"], h200["inter_node_bandwidth"]) == (450e9, 400e9 / 8)
