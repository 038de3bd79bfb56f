"""The engine's pipeline reduction (one stage simulated, the others through the all-stage
schedule) against the closed form for uniform stages: (v·m + p − 1)·(f + b), Narayanan et
al. 2021 §2.2."""

import math

import pytest
from engine_helpers import scenario, tiny

from tiersim.runner import simulate


@pytest.mark.parametrize(
    ("layers", "pipeline", "virtual", "micro_batches"),
    [(4, 4, 1, 8), (8, 4, 2, 8), (4, 2, 1, 1), (8, 2, 2, 4)],
)
def test_uniform_pipeline_matches_the_closed_form(layers, pipeline, virtual, micro_batches):
    # 1e9 parameters and 1 s of forward per layer (1e12 FLOP at 1 TFLOP/s), backward 2 s;
    # nothing moves. One chunk has layers / (p·v) layers: f = that many seconds, b = 2f.
    raw = tiny(
        model={"parameters": 1_000_000_000 * layers, "layers": layers},
        training={"grad_accumulation": micro_batches},
        parallel={"pipeline": pipeline, "virtual_pipeline": virtual},
    )
    r = simulate(scenario(raw))
    f = layers / (pipeline * virtual)
    expected = (virtual * micro_batches + pipeline - 1) * 3 * f
    # plus this stage's SGD update: (4 + 4 + 4) bytes touched per parameter at 1 PB/s
    stage_params = 1e9 * layers / pipeline
    expected += 12 * stage_params / 1e15
    assert math.isclose(r.time_s, expected, rel_tol=1e-9)
    assert math.isclose(r.pipeline_bubble_s, (pipeline - 1) * 3 * f, rel_tol=1e-9)


def _transformer(vocab: int, tied: bool) -> dict:
    # 2 layers over 2 stages, fp32 on a 1 TFLOP/s GPU at efficiency 1 (engine_helpers.tiny)
    return {
        "layers": 2,
        "hidden": 64,
        "heads": 4,
        "ffn_hidden": 256,
        "vocab": vocab,
        "tied_embeddings": tied,
        "max_positions": 1000,
    }


def test_the_output_head_makes_the_last_stage_the_slow_one():
    # 1F1B, p = 2, m = 2. Stage 0 runs f0, b0 per micro-batch; stage 1 the same layer plus the
    # head: f1 = f0 + G + M/3, b1 = b0 + 2G + 2M/3 (the logits GEMM G = 2·s·b·h·V / rate,
    # the memory-bound cross-entropy M = 50 B per logit s·b·V at HBM bandwidth, split a third
    # forward, two backward); sends take c. Write H = G + M/3. By hand:
    #   stage 1: F(0) ends f0+c+f1, B(0) +b1, F(1) +f1 (stage 0's F(1), 2f0+c, came earlier),
    #            B(1) ends f0+c+2f1+2b1;
    #   stage 0: B(1) starts when that arrives, f0+2c+2f1+2b1, and ends b0 later.
    # bubble = step - 2(f0+b0) = 2c + 2f1 + 2b1 - f0 - b0 = 2c + f0 + b0 + 6H.
    # Only G and M depend on the vocabulary: 6H = 6G + 2M; 1,000 more tokens add
    # 6 x 2·1000·1·64·1000 / 1e12 s + 2 x 50·1000·1000 B / 1 PB/s.
    def bubble(vocab: int) -> float:
        raw = tiny(training={"grad_accumulation": 2}, parallel={"pipeline": 2})
        raw["model"] = _transformer(vocab, tied=False)
        return simulate(scenario(raw)).pipeline_bubble_s

    gemm, memory = 2 * 1000 * 64 * 1000 / 1e12, 50 * 1000 * 1000 / 1e15
    # and stage 0's b0 grows by the embedding's dense gradient (workload/megatron_elementwise.py):
    # 1,000 more rows x 64 x (2 + 2 + 4 + 4) B into the fp32 buffer at 1 PB/s, taken off
    dense = 1000 * 64 * 12 / 1e15
    assert bubble(2000) - bubble(1000) == pytest.approx(6 * gemm + 2 * memory - dense, rel=1e-9)


def test_tied_embeddings_all_reduce_their_gradients_between_first_and_last_stage():
    # Megatron's embedding sync: one all-reduce over 2 ranks of vocab x hidden fp32 gradients
    # per step; a 2-rank ring sends 2·(2-1)/2 = 1 buffer: 1000 x 64 x 4 bytes.
    def embedding_bytes(tied: bool) -> int:
        raw = tiny(parallel={"pipeline": 2})
        raw["model"] = _transformer(1000, tied)
        links = simulate(scenario(raw)).links
        return sum(link.bytes_by_direction.get("embedding", 0) for link in links.values())

    assert embedding_bytes(tied=True) == 1000 * 64 * 4
    assert embedding_bytes(tied=False) == 0


def test_unoverlapped_gradient_reduce_adds_its_whole_time_to_the_step():
    # One 1e9-parameter layer (forward 1 s, backward 2 s), fp32 gradients all-reduced over 2
    # GPUs of a node: a 2-rank ring sends one 4 GB buffer at 450 GB/s (the default NVLink),
    # 2 latency terms of 2 us. Overlapped it still follows the one backward, so both cost the
    # same here; with 2 layers, the first layer's reduce hides under the second's backward.
    comm = 4e9 / 450e9 + 2 * 2e-6

    def step(layers: int, overlap: bool) -> float:
        raw = tiny(
            model={"parameters": 1_000_000_000 * layers, "layers": layers},
            parallel={"data": 2, "overlap_gradient_reduce": overlap},
        )
        return simulate(scenario(raw)).time_s

    update = 12 * 1e9 / 1e15  # SGD: 12 bytes touched per parameter at 1 PB/s, per layer
    assert step(1, overlap=False) == pytest.approx(3 + comm + update, rel=1e-9)
    assert step(2, overlap=False) == pytest.approx(6 + 2 * comm + 2 * update, rel=1e-9)
    assert step(2, overlap=True) < step(2, overlap=False) - 0.5 * comm


def _slow_network(tied: bool, **parallel) -> dict:
    # NVLink at 1 GB/s so that collectives are long against this tiny model's compute
    raw = tiny(
        parallel={"pipeline": 2, **parallel},
        training={"grad_accumulation": 2},
        hardware={"network": {"gpus_per_node": 2, "intra_node_bandwidth": "1 GB/s"}},
    )
    raw["model"] = {**_transformer(100_000, tied), "layers": 2}
    return raw


def test_the_embedding_all_reduce_waits_for_the_whole_pipeline():
    # Stage 0 is simulated. Tied or not, it holds the same parameters, so the only difference
    # is the all-reduce of the 100,000 x 64 fp32 embedding gradient with the last stage,
    # which starts once both are done (the pipeline's end): 25.6 MB at 1 GB/s on a 2-rank
    # ring (one buffer sent) plus 2 latency terms of 2 us, all on the critical path.
    tied = simulate(scenario(_slow_network(True)))
    untied = simulate(scenario(_slow_network(False)))
    sync = 100_000 * 64 * 4 / 1e9 + 2 * 2e-6
    assert tied.time_s - untied.time_s == pytest.approx(sync, rel=1e-6)


def test_gradient_reduce_due_at_stage_0s_last_backward_is_exposed():
    # Stage 0's last backward ends the pipeline, so the data-parallel reduce of its gradients
    # (the 25.6 MB embedding among them) cannot hide under the bubble, which came before:
    # at least the embedding's 25.6 ms, less the one layer backward it overlaps, is exposed:
    # a wait on a collective (nothing moves between tiers here).
    r = simulate(scenario(_slow_network(False, data=2)))
    layer_backward = r.compute_s / 2 * 2 / 3  # per micro-batch f + b, and b = 2f
    assert r.exposed_collective_s >= 100_000 * 64 * 4 / 1e9 - layer_backward
    assert r.exposed_transfer_s == 0.0
    waits = r.pipeline_bubble_s + r.exposed_collective_s + r.exposed_transfer_s
    assert r.time_s >= waits + r.compute_s - 1e-12


def test_stage_0s_embedding_opens_its_first_chunk():
    # p = 2, v = 2, 4 layers: stage 0 holds L0 and L1 (units 0 and 1) and the embedding (unit 2),
    # which runs before L0 in the first chunk; its forward takes no time, so the engine
    # must also start an op that finishes at once without starting its dependents twice.
    from tiersim.state.resolved import resolve
    from tiersim.workload.work import build_workload

    raw = tiny(parallel={"pipeline": 2, "virtual_pipeline": 2}, training={"grad_accumulation": 2})
    raw["model"] = {**_transformer(1000, tied=True), "layers": 4}
    s = scenario(raw)
    assert build_workload(resolve(s)).chunks == ((2, 0), (1,))
    assert simulate(s).time_s > 0
