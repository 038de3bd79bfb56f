"""Ground truth for the step's memory timeline: a real PyTorch training step's allocations in
order, recorded on the CPU with the profiler's memory events (torch.profiler, profile_memory:
one event per allocation and free, its bytes signed), beside tiersim's timeline of the same step
for the CPU (state/step_memory.py with the CPU's accounting, nothing outside the allocator).

The step is transformers' model as `tiersim measure --implementation huggingface` builds it
(groundtruth/hfmodels.py), one warm-up step, then the recorded one: `zero_grad(set_to_none=
False)`, forward with labels (the loss inside the model; the output dropped before backward),
backward, the optimizer's step. Before it, what is allocated is the weights, the gradients and
the optimizer state (their storages, each once); the recorded events add to that. Each event
falls in the phase whose `record_function` range holds it (forward, backward, optimizer).

Nothing here is imported unless PyTorch and transformers are installed (the `measure` extra).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch.profiler import record_function

from tiersim.config.schema import Scenario
from tiersim.core.records import record
from tiersim.groundtruth import hfmodels
from tiersim.groundtruth import torchmodels as tm
from tiersim.groundtruth.cpu_gemm_scratchpad import cpu_gemm_route
from tiersim.groundtruth.quiet_imports import quiet_imports
from tiersim.groundtruth.quiet_profiler import memory_profile
from tiersim.groundtruth.selective import recompute_attention_core, recompute_layers
from tiersim.groundtruth.step_peaks import PHASES, StepPeaks, measured_peaks
from tiersim.state.activations import accounting_for
from tiersim.state.inventory import build_inventory
from tiersim.state.model import Transformer
from tiersim.state.optimizers import optimizer as optimizer_named
from tiersim.state.resolved import resolve
from tiersim.state.step_memory import build_events
from tiersim.state.timeline import Timeline, evaluate

# The step runs on one thread, as each FSDP2 rank does (groundtruth/fsdp2_step.py): a 16-bit
# GEMM's workspace on the CPU grows with the threads it runs on (the GQA model's bf16 down
# projection's backward: 13,312 B on one thread, 140,928 B on this machine's), a kernel
# workspace the timeline does not count, which would make the measured peak the machine's.
ONE_THREAD = 1


@record
class StepComparison:
    measured: StepPeaks
    predicted: StepPeaks
    timeline: Timeline  # the prediction

    @property
    def peak_error(self) -> float:
        """Predicted / measured - 1."""
        return self.predicted.peak_bytes / self.measured.peak_bytes - 1


def predicted_timeline(s: Scenario, device: str = "cpu") -> Timeline:
    """tiersim's timeline of the step for `device` (its accounting; no allocator limit); on
    the CPU, for the route this CPU's bf16 GEMMs take (their workspace: cpu_gemm_scratchpad)."""
    r = resolve(s)
    acc = accounting_for(s, device)
    if device == "cpu":
        acc = dataclasses.replace(acc, cpu_gemm=cpu_gemm_route())
    r = dataclasses.replace(r, accounting=acc)
    events = build_events(r, build_inventory(r), 0)
    return evaluate("cpu", float("inf"), events, [])


def predicted_peaks(t: Timeline) -> StepPeaks:
    phases = {p: 0 for p in PHASES}
    for e, a in zip(t.events, t.allocated, strict=True):
        if e.phase in phases:
            phases[e.phase] = max(phases[e.phase], a)
    peak = t.peak_event
    return StepPeaks(t.peak_allocated_bytes, peak.phase if peak else "start", phases)


def train_step(net: Any, optimizers: list, ids: Any, recorded: bool) -> None:
    """One training step of `net` on `ids`; `recorded`: each phase inside a profiler range
    (forward, backward, optimizer) for measured_peaks."""
    for opt in optimizers:
        opt.zero_grad(set_to_none=False)

    def run(name: str, fn):
        if not recorded:
            return fn()
        with record_function(name):
            return fn()

    loss = run("forward", lambda: net(input_ids=ids, labels=ids, use_cache=False).loss)
    run("backward", loss.backward)
    run("optimizer", lambda: [opt.step() for opt in optimizers])


def record_step(s: Scenario, dtype: str, seed: int = 0) -> StepPeaks:
    """Build transformers' model of `s`, train a warm-up step and record the next one."""
    m = resolve(s).model
    assert isinstance(m, Transformer)
    acc = accounting_for(s, "cpu")
    family = hfmodels.family_of(m, s.model.family)
    torch_dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[dtype]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        net = hfmodels.build(m, family, acc, s.seq_len, torch_dtype)
        ids = torch.randint(0, m.vocab, (s.training.micro_batch_size, s.seq_len))
    if s.training.recompute == "full":  # each layer's input kept, the layer recomputed
        recompute_layers(net)
    if s.training.recompute == "selective":  # the attention core recomputed
        recompute_attention_core(net)
    named = list(net.named_parameters())
    with quiet_imports():  # an 8-bit optimizer's library, imported here first: no chatter
        optimizers = optimizer_named(s.training.optimizer).build(torch, named)
    threads = torch.get_num_threads()
    torch.set_num_threads(ONE_THREAD)
    try:
        train_step(net, optimizers, ids, recorded=False)  # warm-up: the optimizer state exists
        params = [p for _, p in named]
        state = sum(tm.optimizer_bytes(opt)[0] for opt in optimizers)
        grads = tm.storage_bytes(p.grad for p in params if p.grad is not None)
        base = tm.storage_bytes(params) + grads + state
        with memory_profile() as prof:
            train_step(net, optimizers, ids, recorded=True)
    finally:
        torch.set_num_threads(threads)
    return measured_peaks(prof, base)


def compare_step(s: Scenario, dtype: str) -> StepComparison:
    t = predicted_timeline(s)
    return StepComparison(record_step(s, dtype), predicted_peaks(t), t)
