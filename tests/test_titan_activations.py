"""The torchtitan accounting (`training.implementation: torchtitan`) against a PyTorch module
built op for op as torchtitan 0.3.0's Llama 3 writes its layer (torchtitan/models/common:
nn.RMSNorm, one fused q/k/v projection split into contiguous q, k, v, rotary positions as a
complex multiply by the table's rows gathered at the positions, K and V at their kv heads into
SDPA with enable_gqa, SwiGLU, the loss over fp32 logits), measured on the CPU with
saved_tensors_hooks, each storage once: per layer and outside the layers, to the byte.
tests/test_titan_real.py measures torchtitan's own model where it is installed."""

from __future__ import annotations

import pytest
from conftest import scenario

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

from tiersim.core.errors import InputError  # noqa: E402
from tiersim.groundtruth.hfmodels import SavedStorages  # noqa: E402
from tiersim.state.activations import accounting_for, layer_bytes, outside_items  # noqa: E402
from tiersim.state.model import build_model  # noqa: E402

H, HEADS, E, F_, V, S = 64, 4, 16, 128, 256, 32


def _rotate(x, cis):
    """ComplexRoPE.apply_rotary_emb: x as complex fp32, times the rows, back to x's dtype."""
    c = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(c * cis).flatten(3).type_as(x)


def _rows(cis, positions):
    """_reshape_for_broadcast with positions: the table's rows gathered (a new tensor)."""
    if positions.shape[0] == 1:
        return cis[positions.squeeze(0)].view(1, positions.shape[1], 1, -1)
    b, t = positions.shape
    table = cis[None, :, None, :].expand(b, -1, -1, -1)
    return torch.gather(table, 1, positions.view(b, t, 1, 1).expand(b, t, 1, cis.shape[-1]))


class Block(nn.Module):
    def __init__(self, kv):
        super().__init__()
        self.kv = kv
        self.attention_norm, self.ffn_norm = nn.RMSNorm(H), nn.RMSNorm(H)
        self.wqkv = nn.Linear(H, (HEADS + 2 * kv) * E, bias=False)
        self.wo = nn.Linear(HEADS * E, H, bias=False)
        self.w1, self.w3 = nn.Linear(H, F_, bias=False), nn.Linear(H, F_, bias=False)
        self.w2 = nn.Linear(F_, H, bias=False)

    def forward(self, x, cis, positions):
        b, t, _ = x.shape
        y = self.attention_norm(x)
        # FusedQKVLinear: [b, t, kv, heads/kv + 2, e], split, each made contiguous
        qkv = self.wqkv(y).view(b, t, self.kv, -1, E)
        q, k, v = (
            p.reshape(b, t, -1, E).contiguous()
            for p in torch.split(qkv, [HEADS // self.kv, 1, 1], dim=-2)
        )
        c = _rows(cis, positions)
        q, k = _rotate(q, c), _rotate(k, c)
        o = F.scaled_dot_product_attention(
            q.transpose(1, 2),
            k.transpose(1, 2),
            v.transpose(1, 2),
            is_causal=True,
            enable_gqa=self.kv < HEADS,
        )
        x = x + self.wo(o.transpose(1, 2).contiguous().flatten(2))
        y = self.ffn_norm(x)
        return x + self.w2(F.silu(self.w1(y)) * self.w3(y))


class Model(nn.Module):
    def __init__(self, kv, layers=2):
        super().__init__()
        self.tok_embeddings = nn.Embedding(V, H)
        self.layers = nn.ModuleList(Block(kv) for _ in range(layers))
        self.norm, self.output = nn.RMSNorm(H), nn.Linear(H, V, bias=False)
        freqs = 1.0 / 10000.0 ** (torch.arange(0, E, 2).float() / E)
        angles = torch.outer(torch.arange(S).float(), freqs)
        self.register_buffer("cis", torch.polar(torch.ones_like(angles), angles), False)

    def forward(self, ids, labels):
        positions = torch.arange(ids.shape[1]).expand(ids.shape).contiguous()  # the trainer's
        x = self.tok_embeddings(ids)
        for layer in self.layers:
            x = layer(x, self.cis, positions)
        pred = self.output(self.norm(x))
        # CrossEntropyLoss: summed, then divided by the trainer's int64 count of valid tokens
        loss = F.cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1), reduction="sum")
        return loss / torch.tensor(ids.numel())


def measured(kv, dtype, batch):
    torch.manual_seed(0)
    net = Model(kv)
    for p in net.parameters():
        p.data = p.data.to(dtype)
    saved = SavedStorages(2, [*net.parameters(), *net.buffers()])
    saved.watch(net.layers)
    with torch.autograd.graph.saved_tensors_hooks(saved.pack, saved.unpack):
        net(torch.randint(0, V, (batch, S)), torch.randint(0, V, (batch, S)))
    return saved.per_layer, saved.outside


def titan(kv, dtype, **training):
    model = {
        "hidden": H,
        "heads": HEADS,
        "kv_heads": kv,
        "head_dim": E,
        "layers": 2,
        "vocab": V,
        "ffn_hidden": F_,
        "norm": "rmsnorm",
        "position": "rope",
        "gated_mlp": True,
        "tied_embeddings": False,
        "max_positions": S,
    }
    precision = {"weights": dtype, "gradients": dtype, "master": "none", "optimizer": dtype}
    # the module measured computes its loss in one piece, as torchtitan's CrossEntropyLoss
    # (llama3_debugmodel_ce_loss); its default, the chunked loss: test_chunked_loss.py
    training = {
        "implementation": "torchtitan",
        "precision": precision,
        "loss_chunks": 1,
        **training,
    }
    return scenario({"name": "t", "model": model, "training": training})


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("kv", [4, 2, 1])
@pytest.mark.parametrize("batch", [1, 2])
def test_torchtitan_layers_and_outside_to_the_byte(dtype, kv, batch):
    s = titan(kv, dtype)
    m, acc = build_model(s.model), accounting_for(s, "cpu")
    per_layer, outside = measured(kv, {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype], batch)
    predicted = layer_bytes(m, S, batch, acc)
    assert per_layer == [predicted, predicted]
    assert outside == sum(i.nbytes for i in outside_items(m, S, batch, acc))


def test_torchtitan_refuses_what_its_llama_model_does_not_have():
    with pytest.raises(InputError, match="attention_kernel: eager"):
        titan(4, "bf16", attention_kernel="eager")
    raw = {"name": "g", "model": {"preset": "gpt2"}, "training": {"implementation": "torchtitan"}}
    with pytest.raises(InputError, match="torchtitan activation accounting"):
        scenario(raw)
