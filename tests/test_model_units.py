"""A model is a list of units (embedding, each layer, head), each layer with its own shape:
the inventory and the activations sum the units, so layers need not be alike."""

from __future__ import annotations

import dataclasses

import pytest
from conftest import scenario

from tiersim.state.inventory import layers_activation_bytes, stage_layers, stage_matrices
from tiersim.state.model import ModelUnit, Transformer, UnitKind, build_model
from tiersim.state.resolved import resolve

GPT2 = {"name": "g", "model": {"preset": "gpt2"}, "training": {"seq_len": 1024}}
GPT2_PARAMETERS = 124_439_808  # Radford et al. 2019, as Hugging Face's GPT-2 small counts


@dataclasses.dataclass(frozen=True)
class WideFirstLayer(Transformer):
    """GPT-2 with its first layer's MLP twice as wide: a model whose layers differ."""

    def units(self) -> tuple[ModelUnit, ...]:
        embedding, rest, head = Transformer.units(self)
        wide = Transformer(**{**vars(self), "ffn_hidden": 2 * self.ffn_hidden})
        first = ModelUnit("L0", UnitKind.LAYER, tuple(wide.layer_matrices()), wide)
        others = dataclasses.replace(rest, name="L1", first=1, count=self.layers - 1)
        return (embedding, first, others, head)


def test_a_transformer_is_its_embedding_layers_and_head():
    model = build_model(scenario(GPT2).model)
    units = model.units()
    # twelve alike layers are one run of them
    assert [(u.kind, u.count) for u in units] == [
        (UnitKind.EMBEDDING, 1),
        (UnitKind.LAYER, 12),
        (UnitKind.HEAD, 1),
    ]
    assert sum(m.size * u.count for u in units for m in u.matrices) == GPT2_PARAMETERS
    # a stage's layers: the run cut at its ends (4 stages of 3 layers)
    [third] = stage_layers(model.units(), 2, 4)
    assert (third.name, third.first, third.count) == ("L6", 6, 3)


def test_a_model_of_any_depth_is_a_few_units():
    deep = build_model(scenario({**GPT2, "model": {"preset": "gpt2", "layers": 2**40}}).model)
    assert len(deep.units()) == 3
    assert sum(m.size for m in stage_matrices(deep, deep.units(), 0, 1, 1)) > 2**40 * 7_000_000


def test_layers_that_differ_are_counted_each_as_it_is():
    s = scenario(GPT2)
    base = build_model(s.model)
    mixed = WideFirstLayer(**vars(base))
    # the wider MLP: up and down projections 2 x 768 x 3,072 more, and 3,072 more bias
    extra = 2 * 768 * 3072 + 3072
    assert (
        sum(m.size for m in stage_matrices(mixed, mixed.units(), 0, 1, 1))
        == GPT2_PARAMETERS + extra
    )
    # the MLP's wide tensors keep 4·s·b·f bytes (Korthikanti et al.): 4 x 1,024 x 3,072 more
    plain = layers_activation_bytes(resolve(s), stage_layers(base.units(), 0, 1), 1, False)
    wider = layers_activation_bytes(resolve(s), stage_layers(mixed.units(), 0, 1), 1, False)
    assert wider - plain == pytest.approx(4 * 1024 * 3072, rel=1e-12)
    # over two pipeline stages, only the first stage holds the wide layer
    first, second = (stage_matrices(mixed, mixed.units(), k, 2, 1) for k in (0, 1))
    assert (
        sum(m.size for m in first)
        - sum(m.size for m in stage_matrices(base, base.units(), 0, 2, 1))
        == extra
    )
    assert sum(m.size for m in second) == sum(
        m.size for m in stage_matrices(base, base.units(), 1, 2, 1)
    )
