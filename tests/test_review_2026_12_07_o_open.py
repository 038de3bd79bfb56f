"""Review 2026-12-07 (o)'s "Found, not fixed" rows closed (docs/review-2026-12-07-o.md, 8 to
12) and accreshard's leftover (CHANGELOG 0.24.0): each confirmed in the framework's source
first (cited beside each test), each expected value worked by hand here."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import scenario
from problem_lines import said
from test_chunked_loss import MODEL, running_peak, titan

from tiersim.config.load import load_scenario
from tiersim.state.inventory import build_inventory
from tiersim.state.resolved import resolve
from tiersim.state.step_memory import build_events, gpu_timeline

ROOT = Path(__file__).resolve().parent.parent
FSDP2_7B = ROOT / "scenarios" / "fsdp2-cpu-offload-llama2-7b.yaml"
ZERO_OFFLOAD = "scenarios/zero-offload-10b-dgx2.yaml"


def test_chunked_loss_keeps_the_heads_gradient_to_the_fsdp2_root_reduce_scatter():
    # fsdp2-cpu-offload-llama2-7b, implementation torchtitan (its ChunkedLossWrapper, 8 chunks),
    # the whole model one FSDP2 unit (fetch: model): lm_head is no FSDPModule of its own, so
    # the wrapper's FSDP2 path does not run (torchtitan 0.3.0 components/loss.py
    # `fsdp_enabled = isinstance(lm_head, FSDPModule)`); each chunk's head gradient goes
    # into the root group's unsharded .grad (AccumulateGrad: the first stolen, the next added
    # in place, torch 2.13 accumulate_grad.h), which only the root's post_backward reads, from
    # the final callback after the whole backward (_fsdp_state.py
    # `_root_post_backward_final_callback`, _fsdp_param_group.py `post_backward`). At
    # `backward: embeddings`:
    #   reduce-scatter input 6,738,415,616 x 4 B        = 26,953,662,464
    #   the layers' bf16 gradients 32 x 202,383,360 x 2 = 12,952,535,040
    #   the embedding's and the head's 2 x 32,000 x 4,096 x 2 = 524,288,000
    #   resident workspace 17,039,360 (the inventory's); the embedding's saved token ids
    #   2 x 4,096 x 8 B = 65,536
    # 40,447,590,400 B; before, the head's 262,144,000 B was freed inside the forward.
    sets = ["training.implementation=torchtitan", "training.offload.fetch=model"]
    r = resolve(load_scenario(FSDP2_7B, sets).scenario)
    t = gpu_timeline(r, build_inventory(r))
    assert t.peak_event.moment == "backward: embeddings"
    assert t.peak_parts["head's weight gradient"] == 32_000 * 4_096 * 2 == 262_144_000
    want = 26_953_662_464 + 12_952_535_040 + 524_288_000 + 17_039_360 + 65_536
    assert t.peak_allocated_bytes == want == 40_447_590_400


def _events(tied: bool, fsdp2: bool) -> list:
    raw = titan()
    raw["model"] = {**MODEL, "tied_embeddings": tied}
    if fsdp2:
        raw["training"]["framework"] = "fsdp"
        raw["parallel"] = {"data": 2, "zero_stage": 3}
    r = resolve(scenario(raw))
    return build_events(r, build_inventory(r), 0)


def test_the_kept_gradient_lies_beside_every_later_chunk():
    # test_chunked_loss's model (bf16, 128 tokens in 8 chunks of 16, h 64, V 512) under FSDP2
    # over 2 ranks: the head's gradient 512 x 64 x 2 B = 65,536 is made by the first chunk
    # and kept; the second chunk (as every later one) peaks beside it: the hidden states
    # 16,384 + the fp32 buffer 32,768 + the kept gradient 65,536 + the chunk's bf16 logits
    # 16,384, fp32 log-softmax 32,768 and its two fp32 gradients 2 x 32,768 = 229,376 B
    # (163,840 without FSDP2, test_chunked_loss). Its own gradient is a transient, added in.
    events = _events(tied=False, fsdp2=True)
    loss = [e for e in events if e.moment.endswith(": loss")]
    assert running_peak(loss) == 163_840 + 65_536 == 229_376
    head = [(e.moment, e.key, e.alloc, e.nbytes) for e in events if "d head" in e.key]
    assert head == [
        ("forward: loss", "d head", True, 65_536),
        ("forward: loss", "chunk d head", True, 65_536),
        ("forward: loss", "chunk d head", False, 65_536),
        ("backward: embeddings", "d head", False, 65_536),  # after the root's reduce-scatter
    ]


@pytest.mark.parametrize("fsdp2", [False, True])
def test_a_tied_weight_under_the_chunked_loss_has_no_summed_gradient(fsdp2):
    # the chunk's backward ends at the tied weight's AccumulateGrad (its own graph, inside the
    # forward), so the embedding's backward later adds into .grad: no input buffer holds the
    # two uses' gradients and their sum (3 x 65,536 B) as in one piece
    events = _events(tied=True, fsdp2=fsdp2)
    assert not [e for e in events if e.key == "d tied"]
    kept = [e.moment for e in events if e.key == "d head" and not e.alloc]
    assert kept == (["backward: embeddings"] if fsdp2 else ["forward: loss"])


def test_deepspeed_stage_0_with_the_optimizer_on_the_cpu_is_refused(cli):
    # zero-offload-10b-dgx2 at zero_stage 0: DeepSpeed builds DeepSpeedCPUAdam over the GPU's
    # parameters (engine.py 007cca6a `_configure_basic_optimizer`, zero_use_cpu_optimizer)
    # and no ZeRO optimizer (stage 0), so its step asserts "CPUAdam param is on cuda:0 and
    # must be 'cpu'" (cpu_adam.py a9a61885); zero/config.py: offload_optimizer "Valid for
    # ZeRO stage 1, 2, 3". Before: valid, and run as stage 2's CPU update.
    code, out, err = cli("validate", ZERO_OFFLOAD, "--set", "parallel.zero_stage=0")
    assert code == 2, (out, err)
    assert "Traceback" not in err
    line = said(err.strip().splitlines()[0], ZERO_OFFLOAD)
    assert line.coded == ("E-CONFLICT", "placement.optimizer_compute")
    assert "Valid for ZeRO stage 1, 2, 3" in line.message
    assert "expected parallel.zero_stage 1, 2 (ZeRO-Offload's) or 3" in line.message
    for ok in (
        ["parallel.zero_stage=1"],
        ["parallel.zero_stage=0", "placement.optimizer_compute=gpu"],
    ):
        code, _, err = cli("validate", ZERO_OFFLOAD, *[a for s in ok for a in ("--set", s)])
        assert code == 0, err


def test_a_fetch_key_under_megatron_is_refused_in_the_words_of_what_it_sets(cli):
    path = "scenarios/published/korthikanti2022-175b-full-recompute.yaml"
    code, _, err = cli("validate", path, "--set", "training.offload.fetch=model")
    assert code == 2
    line = said(err.strip().splitlines()[0], path)
    assert line.coded == ("E-PLACEMENT", "training.offload.fetch")
    assert line.message.startswith("'model': sets the unit sharded or offloaded weights are")
    assert "expected the key left out, or framework fsdp or deepspeed" in line.message
    assert "models Megatron-LM without offload" not in line.message  # the CPU offload's words


# test_fsdp_reshard's model: 4 layers of 41,088 values, the rest (embeddings, head, final
# norm) 128,064 values, fp32, FSDP2 over data 8, one micro-batch
REST_SENT = 128_064 * 4 * 7 // 8  # one all-gather of the rest's 512,256 B: 448,224 B sent


def _rest(given: bool | None, framework: str = "fsdp"):
    from test_fsdp_reshard import FP32, TINY

    from tiersim.workload.work import build_workload

    training = {"seq_len": 128, "precision": FP32, "workspace": "0 B", "framework": framework}
    par = {"data": 8, "zero_stage": 3, "reshard_after_forward": given}
    r = resolve(scenario({"name": "t", "model": TINY, "training": training, "parallel": par}))
    return r, build_workload(r).units


@pytest.mark.parametrize(
    "given, framework, again",
    [(None, "fsdp", 0), (True, "fsdp", 1), (False, "fsdp", 0), (None, "deepspeed", 0)],
)
def test_the_root_units_contention_counts_the_gathers_the_engine_makes(given, framework, again):
    # The engine gathers the rest (FSDP2's root group) before each forward, and again before
    # its backward only where reshard_after_forward: true is given (engine/schedule_passes.py
    # `fetch_weights`; counted from its NVLink bytes in tests/test_fsdp_reshard.py: 1 gather
    # unset, 2 given true). Its SM-contention and copy-out charge (workload/fsdp_exposure.py)
    # counted the backward's gather unset too. Each gather charges the computation beside it
    # the same (collective_sm_share x its time alone, + FSDP2's copy-out), its forward's
    # charge: a unit gathered again for its backward (a layer, unless reshard_after_forward
    # is false) is charged one forward's more there than the root, gathered again `again`
    # times. DeepSpeed's ZeRO-3 likewise: the engine holds a unit used twice in a row (its
    # rest: the last of the forward, the first of the backward), as DeepSpeed keeps a
    # parameter reused within max_reuse_distance (1e9 by default, zero/config.py).
    from tiersim.workload.fsdp_exposure import fsdp_overheads_s

    r, units = _rest(given, framework)
    rest = units[-1]
    assert rest.dp_weights.nbytes == REST_SENT == 448_224
    fwd, bwd = fsdp_overheads_s(r, rest, root=True)
    _, as_a_layer = fsdp_overheads_s(r, rest)
    assert fwd > 0
    assert as_a_layer - bwd == pytest.approx(((given is not False) - again) * fwd, rel=1e-9)


def test_the_pcie_busy_time_is_both_directions_union_and_moves_with_their_overlap():
    # fsdp2-cpu-offload-llama2-7b, gradients reduced in fp32 (as shipped) and in bf16: the
    # PCIe bytes are the same each way, by hand (fp32 shards over 8 ranks: a layer's
    # 202,383,360 x 4 / 8 = 101,191,680 B, the rest's 262,148,096 x 4 / 8 = 131,074,048 B):
    #   dram->hbm, each layer's shard for its forward and its backward, the rest's for its
    #   forward (held to its backward), 4 micro-batches: 32 x 2 x 4 x 101,191,680 +
    #   4 x 131,074,048 = 26,429,366,272 B;
    #   hbm->dram, each gradient shard once a micro-batch: 32 x 4 x 101,191,680 +
    #   4 x 131,074,048 = 13,476,831,232 B.
    # A link's busy time is the time bytes move on it in either direction (engine/flows.py
    # `_channels_for`: both directions one channel; engine/metrics.py `link_busy_s`: the union
    # of its flows' spans), so it lies between the busier direction's
    # time at 25 GB/s and both directions' (26,429,366,272 / 25e9 = 1.0572 s,
    # 39,906,197,504 / 25e9 = 1.5962 s), lower where the gradients' copies to the host run
    # beside the next layers' fetches: the fp32 reduce-scatter takes twice bf16's on NVLink,
    # so each shard's copy starts later, beside fewer fetches, and the union grows. Review o's
    # 10: not contention, the same bytes at the same rate each way (docs/fsdp2-memory.md).
    from tiersim.runner import simulate

    busy = {}
    for gradients in ("fp32", "bf16"):
        loaded = load_scenario(FSDP2_7B, [f"training.precision.gradients={gradients}"])
        pcie = simulate(loaded.scenario).links["pcie"]
        down, up = 26_429_366_272, 13_476_831_232
        assert pcie.bytes_by_direction == {"dram->hbm": down, "hbm->dram": up}
        assert down / 25e9 <= pcie.busy_s <= (down + up) / 25e9
        busy[gradients] = pcie.busy_s
    assert busy["fp32"] > busy["bf16"]
