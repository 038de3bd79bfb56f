"""The measured matrix in README.md: `tiersim measure --implementation huggingface` over
GPT-2, Llama, Mistral and Qwen2 x eager/sdpa x dropout 0/0.1 x fp32/bf16 x (s, b) = (64, 1),
(128, 2) on this machine's CPU (L = 2, h = 256, a = 4, kv = 2 for Llama-style, f = 688,
V = 2000). Prints a Markdown table: bytes per layer and outside, measured (predicted = measured
is marked '=', else the prediction follows). Not a test (about two minutes on two cores).

    .venv/bin/python benchmarks/hf_activation_matrix.py
"""

from __future__ import annotations

import itertools

import torch

from tiersim.groundtruth.measure import Request, measure

DIMS = {"layers": 2, "hidden": 256, "heads": 4, "ffn_hidden": 688, "vocab": 2000}
GPT2 = {**DIMS, "max_positions": 512, "tied_embeddings": True, "qkv_bias": True,
        "attn_out_bias": True, "mlp_bias": True}  # fmt: skip
LLAMA = {**DIMS, "kv_heads": 2, "gated_mlp": True, "norm": "rmsnorm", "position": "rope"}
FAMILIES = {
    "gpt2": {**GPT2, "family": "gpt2"},
    "llama": {**LLAMA, "family": "llama"},
    "mistral": {**LLAMA, "family": "mistral"},
    "qwen2": {**LLAMA, "family": "qwen2", "qkv_bias": True},
}


def cell(measured: int, predicted: int | None) -> str:
    return f"{measured:,} =" if measured == predicted else f"{measured:,} (pred. {predicted:,})"


def main() -> None:
    torch.set_num_threads(1)
    print("| family | kernel | dropout | dtype | (64,1) layer | (64,1) outside "
          "| (128,2) layer | (128,2) outside |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for fam, kernel, drop, dtype in itertools.product(
        FAMILIES, ("eager", "sdpa"), (0.0, 0.1), ("fp32", "bf16")
    ):
        cells = []
        for s, b in ((64, 1), (128, 2)):
            req = Request(model=FAMILIES[fam], seq_len=s, micro_batch_size=b, dtype=dtype,
                          attention=kernel, device="cpu", implementation="huggingface",
                          dropout=drop)  # fmt: skip
            m = measure(req)
            cells += [
                cell(m.activations_per_layer[1], m.predicted_per_layer),
                cell(m.activations_outside_layers, m.predicted_outside),
            ]
        print(f"| {fam} | {kernel} | {drop:g} | {dtype} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
