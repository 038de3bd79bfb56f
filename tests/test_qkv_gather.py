"""Tensor parallelism beyond the KV heads (issue 39): Megatron-Core's all-gather of the fused
QKV output (NVIDIA/Megatron-LM @ 00caa53a, attention.py `get_query_key_value_tensors`, the
`num_query_groups < world_size` branch; mappings.py `_AllGatherFromTensorParallelRegion`:
forward all-gather, backward reduce-scatter, on the tensor group) and the one KV head each
rank then keeps. Expected bytes written out by hand."""

from __future__ import annotations

import pytest
from engine_helpers import merge, scenario

from tiersim.engine.simulate import simulate
from tiersim.state.accounting import accounting_for
from tiersim.state.activation_kinds import divided
from tiersim.state.activations import layer_items
from tiersim.state.model import build_model
from tiersim.state.resolved import resolve
from tiersim.workload.qkv_gather import qkv_gather_comms
from tiersim.workload.work import build_workload

# 2 layers, h 64, 8 query heads and 2 KV heads of 8, gated MLP of 128. One micro-batch:
# s 16 x b 2 = T 32 tokens, bf16; 2 micro-batches; one GPU's NVLink (dgx-h100, t <= 8).
MODEL = {
    "layers": 2,
    "hidden": 64,
    "heads": 8,
    "kv_heads": 2,
    "ffn_hidden": 128,
    "vocab": 128,
    "gated_mlp": True,
    "norm": "rmsnorm",
    "position": "rope",
}
T, H, A, K, E = 32, 64, 8, 2, 8
QKV = T * (A + 2 * K) * E * 2  # the gathered [s, b, (a + 2k)·e] output in bf16: 6,144 B
HIDDEN = T * H * 2  # s·b·h in bf16: 4,096 B


def _raw(**over):
    raw = {
        "name": "qkv",
        "model": MODEL,
        "training": {"micro_batch_size": 2, "seq_len": 16, "grad_accumulation": 2},
        "hardware": {"preset": "dgx-h100"},
    }
    return merge(raw, over)


def test_the_gather_and_its_reduce_scatter_by_hand():
    fwd, bwd = qkv_gather_comms(resolve(scenario(_raw(parallel={"tensor": 4}))), _model())
    # ring all-gather and reduce-scatter over 4 ranks: each rank sends 3/4 of the whole tensor
    assert QKV == 6_144
    assert fwd.nbytes == pytest.approx(QKV * 3 / 4) == 4_608
    assert bwd.nbytes == pytest.approx(QKV * 3 / 4)
    assert (fwd.group, bwd.group) == ("tensor", "tensor")


def test_full_recompute_gathers_again_in_backward():
    raw = _raw(parallel={"tensor": 4}, training={"recompute": "full"})
    _, bwd = qkv_gather_comms(resolve(scenario(raw)), _model())
    assert bwd.nbytes == pytest.approx(2 * QKV * 3 / 4)  # its reduce-scatter + the rerun gather


@pytest.mark.parametrize("tensor", [1, 2])
def test_no_gather_where_the_kv_heads_divide_over_the_ranks(tensor):
    assert qkv_gather_comms(resolve(scenario(_raw(parallel={"tensor": tensor}))), _model()) == (
        None,
        None,
    )


def test_a_step_s_tensor_link_bytes_by_hand():
    """Scenario level: no sequence parallelism, t = 4 > 2 KV heads, one stage."""
    r = simulate(scenario(_raw(parallel={"tensor": 4})))
    all_reduce = 2 * 3 / 4 * HIDDEN  # ring all-reduce over 4: 6,144 B sent
    layers = 2 * 2 * 4 * all_reduce  # 2 layers x 2 micro-batches x (2 forward + 2 backward)
    rest = 2 * 2 * all_reduce  # the embedding's forward and the head's backward, 2 mb
    gather = 2 * 2 * 2 * QKV * 3 / 4  # its all-gather and reduce-scatter, 2 layers x 2 mb
    assert (layers, rest, gather) == (98_304, 24_576, 36_864)
    assert r.links["nvlink"].bytes_by_direction["tensor"] == 159_744


def test_the_gather_stays_blocking_under_tensor_overlap():
    """Transformer Engine's userbuffers overlap the linears' collectives, not this one: with
    both overlaps on, each layer's blocking collectives are the gather's pair alone (the
    linears' hidden behind their GEMMs); the links carry every byte either way (review m:
    hidden collectives' bytes still cross NVLink)."""
    par = {"tensor": 4, "sequence": True}
    over = {**par, "overlap_tensor_forward": True, "overlap_tensor_backward": True}
    layers = [u for u in build_workload(resolve(scenario(_raw(parallel=over)))).units]
    layers = [u for u in layers if u.name != "rest"]
    assert len(layers) == 2
    for u in layers:  # ring all-gather / reduce-scatter over 4: 3/4 of 6,144 B = 4,608 B
        assert (u.tp_forward.nbytes, u.tp_backward.nbytes) == (4_608, 4_608)
    r = simulate(scenario(_raw(parallel=over)))
    plain = simulate(scenario(_raw(parallel=par)))
    tensor = plain.links["nvlink"].bytes_by_direction["tensor"]
    assert r.links["nvlink"].bytes_by_direction["tensor"] == tensor
    assert plain.time_s > r.time_s  # the linears' collectives hidden; the gather still there


def test_each_rank_keeps_one_kv_head():
    """K and V as Megatron keeps them for the attention core: one KV head a rank
    (num_query_groups_per_partition = 1), not 2/4 of one."""
    s = scenario(_raw(parallel={"tensor": 4}))
    acc = accounting_for(s)
    kv = [i for i in layer_items(_model(), 16, 2, acc) if i.name == "k, v"]
    per_rank = divided(kv, 4, False)
    assert per_rank == 2 * T * 1 * E * 2 == 1_024  # K and V, T tokens, 1 head of 8, bf16


def test_a_layout_neither_dividing_is_refused(cli, tmp_path):
    """Megatron-Core asserts num_query_groups be a multiple or divisor of the tensor size."""
    path = tmp_path / "s.yaml"
    path.write_text(
        "name: s\nmodel: {layers: 2, hidden: 768, heads: 48, kv_heads: 8, ffn_hidden: 1024,"
        " vocab: 128, position: rope}\nparallel: {tensor: 12}\nhardware: {preset: dgx-h100}\n"
    )
    code, _, err = cli("validate", path)
    assert code == 2
    assert "kv_heads (8) and the tensor-parallel size (12) must divide one another" in err


def _model():
    return build_model(scenario(_raw()).model)
