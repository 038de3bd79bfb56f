"""`tiersim presets`: every shipped preset listed with its key figures."""

import json
import re
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


def test_presets_give_the_cpu_rates_by_their_preset_keys(cli):
    # dgx-h100.yaml: cpu.optimizer_rate 0.175 Gparam/s (the update without a framework) and
    # cpu.adam_kernel_rate 0.794 (DeepSpeed's kernel, 14 Xeon 8480C cores a rank); gh200.yaml
    # sets only optimizer_rate, 1.4 Gparam/s (DeepSpeed then uses it for the kernel too)
    code, out, err = cli("presets")
    assert code == 0, err
    lines = out.splitlines()
    (head,) = [ln for ln in lines if ln.startswith("hardware preset") and "GPU" in ln]
    columns = re.split(r"\s{2,}", head.strip())
    assert "CPU optimizer" not in columns  # a name no preset file has
    rate, kernel = columns.index("cpu.optimizer_rate"), columns.index("cpu.adam_kernel_rate")
    rows = {ln.split()[0]: re.split(r"\s{2,}", ln.strip()) for ln in lines if "TFLOP/s" in ln}
    assert (rows["dgx-h100"][rate], rows["dgx-h100"][kernel]) == (
        "0.175 Gparam/s",
        "0.794 Gparam/s",
    )
    assert (rows["gh200"][rate], rows["gh200"][kernel]) == ("1.4 Gparam/s", "-")
    code, out, err = cli("presets", "--format", "json")
    hardware = json.loads(out)["hardware"]
    assert (
        hardware["dgx-h100"]["cpu_optimizer_rate"],
        hardware["dgx-h100"]["cpu_adam_kernel_rate"],
    ) == (0.175e9, 0.794e9)
    assert hardware["gh200"]["cpu_adam_kernel_rate"] is None


def test_presets_table_shows_which_models_are_moe(cli):
    # Mixtral 8x7B: 8 experts, 2 per token, each 3 x 4096 x 14336 = 176,160,768 parameters; a
    # token skips 6 of them in each of 32 layers: 46,702,792,704 - 6 x 32 x 176,160,768 =
    # 12,879,925,248 active (Mistral AI: "12.9B active parameters"); every layer has experts, so
    # no dense MLP width. DeepSeek-V3 (its config.json): 256 routed experts of 2048, 8 per
    # token, 1 shared; its 3 first layers dense, of 18432; 37B active (DeepSeek-V3 report: "37B
    # activated for each token"). Qwen3-30B-A3B: 128 experts of 768, 8 per token, "3.3B
    # activated" (Qwen3 report), every layer MoE.
    assert 46_702_792_704 - 6 * 32 * 3 * 4096 * 14336 == 12_879_925_248
    code, out, err = cli("presets")
    assert code == 0, err
    lines = out.splitlines()
    head = re.split(r"\s{2,}", next(ln for ln in lines if ln.startswith("model preset")).strip())
    rows = {ln.split()[0]: re.split(r"\s{2,}", ln.strip()) for ln in lines if " B (" in ln}
    cols = ("active", "dense ffn", "experts", "expert ffn")
    got = {name: tuple(rows[name][head.index(c)] for c in cols) for name in rows}
    assert got["mixtral-8x7b"] == ("12.88 B", "-", "8 x top-2", "14336")
    assert got["deepseek-v3"][1:] == ("18432", "256 x top-8 + 1 shared", "2048")
    assert got["deepseek-v3"][0].startswith("37.")
    assert got["qwen3-30b-a3b"][1:] == ("-", "128 x top-8", "768")
    assert got["qwen3-30b-a3b"][0].startswith("3.3")
    assert got["llama-2-7b"] == ("all", "11008", "-", "-")  # dense: every parameter, every token
    code, out, err = cli("presets", "--format", "json")
    models = json.loads(out)["models"]
    assert models["deepseek-v3"]["expert_ffn_hidden"] == 2048
    assert models["deepseek-v3"]["shared_expert_ffn_hidden"] == 2048
    assert models["mixtral-8x7b"]["shared_experts"] == 0
    assert "expert_ffn_hidden" not in models["llama-2-7b"]
    # every MoE row has the same keys (no shared experts: no width, null); a dense row none
    # of the expert keys, as it has no `experts`
    expert_keys = {"experts", "experts_per_token", "moe_layers", "active_parameters"}
    expert_keys |= {"expert_ffn_hidden", "shared_experts", "shared_expert_ffn_hidden"}
    moe = {"deepseek-v3", "mixtral-8x7b", "qwen3-30b-a3b"}
    assert {name for name, m in models.items() if "experts" in m} == moe
    assert len({frozenset(models[name]) for name in moe}) == 1
    assert expert_keys <= set(models["mixtral-8x7b"])
    assert models["mixtral-8x7b"]["shared_expert_ffn_hidden"] is None
    assert models["qwen3-30b-a3b"]["shared_expert_ffn_hidden"] is None
    assert not any(expert_keys & set(m) for name, m in models.items() if name not in moe)
