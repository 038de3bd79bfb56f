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
