"""A scenario resolved once, at the edge, into what the layers below the file format need
(as Calculon separates model, execution and system): the model (its units: embedding, each
layer, head), the execution plan (parallelism, placement, precision and training choices, the
simulation's and the checkpoint's settings, the framework's offload behaviour) and the machine
(tiers, links, network, GPU, CPU), with the budgets the run is judged against.

The engine, `build_workload` and `build_inventory` take a `Resolved` (or the part they read);
the activation accounting (`state/activations.accounting_for`, which reads the model as the
file gives it) is resolved here too, so nothing below the edge reads `Resolved.scenario`.
"""

from __future__ import annotations

from dataclasses import replace

from tiersim.config.execution import Execution, execution_plan
from tiersim.config.hardware_schema import Hardware
from tiersim.config.schema import Budget, Scenario
from tiersim.config.vocab_padding import scenario_vocab
from tiersim.core.records import record
from tiersim.state.activations import Accounting, accounting_for
from tiersim.state.held_layout import held_fusions
from tiersim.state.model import Model, build_model
from tiersim.state.model_shapes import ModelUnit


@record
class Resolved:
    """One scenario as the engine reads it: model, execution plan, machine."""

    name: str
    model: Model
    execution: Execution
    machine: Hardware
    budget: Budget  # what the run is judged against (flash write budgets, steps per day)
    accounting: Accounting  # how activations are counted (implementation, kernel, dropout)
    scenario: Scenario  # the file's form, for the edges above (reports, traces); not read below
    units: tuple[ModelUnit, ...]  # model.units(), worked out once here: a run reads them a
    # dozen times (the inventory, the workload, its breakdown), each a few dozen Matrix objects


def resolve(s: Scenario) -> Resolved:
    """The scenario's model built and its execution plan read, once."""
    model, plan, acc = padded_model(s), execution_plan(s), accounting_for(s)
    return Resolved(s.name, model, plan, s.hardware, s.budget, acc, s, model.units())


def padded_model(s: Scenario) -> Model:
    """The scenario's model with the vocabulary its framework pads it to (config/vocab_padding.py):
    the embedding, the output layer, the logits and the loss all hold the padded rows."""
    model = held_model(s, build_model(s.model))
    vocab = scenario_vocab(s)
    if model.vocab is None or vocab is None or vocab == model.vocab:  # generic: no vocabulary
        return model
    return replace(model, vocab=vocab, tokenizer_vocab=model.vocab)


def held_model(s: Scenario, model: Model) -> Model:
    """The model with its tensors listed as the implementation holds them (module docstring of
    state/held_layout.py): transformers' GPT-2 and Phi-3 under `huggingface`, Megatron-Core's
    and Megatron-DeepSpeed's fused QKV and fc1 under `megatron`."""
    if not hasattr(model, "qkv_as_one"):
        return model
    qkv, gate_up = held_fusions(s, model.fused_qkv, model.gated_mlp)
    return replace(model, qkv_as_one=qkv, gate_up_as_one=gate_up) if qkv or gate_up else model
