"""How the step-time model's fitted constants were obtained (docs/science.md "The timing model").

Each is found by bisection so that the simulated figure equals one published measurement:

- dgx-a100 `gpu.efficiency`: Korthikanti et al. 2022 Table 4, one 22B layer (h 6144, 64 heads,
  t 8, micro-batch 4, s 2048), no recompute: forward + backward 19.6 ms (the layer's kernels
  and its blocking tensor-parallel collectives, as `tiersim run` times them);
- `parallel.pipeline_engine_overhead` of the MT-NLG scenarios (DeepSpeed's pipeline engine):
  scenarios/published/smith2022-mtnlg-530b-280nodes.yaml, 60.1 s;
- the Ma and Wang 2025 offload runs' `gpu.efficiency` (ma2025-qwen2.5-1.5b-zero2, 240 ms) and
  then `cpu.path_overhead_per_tensor` (ma2025-qwen2.5-1.5b-zero-offload, 1,365 ms: DeepSpeed's
  CPU path in parts, what its modelled parts leave, per parameter tensor of the rank's
  partition: 169 of the model's 338 on each of the 2 ranks);
- the dgx2 preset's `gpu.efficiency` (ren2021-zero-offload-1b, ZeRO-Offload Fig. 8's 1B run on
  one V100, 136.05 s), with that run's per-tensor overhead the fit above, unscaled (per-tensor
  Python work and syncs run on the rank's one thread, not on the cores).

Each is fitted under the shipped GEMM model (each GEMM on the best of cuBLAS's tiles at the
rate the preset's measured `gpu.l2_bandwidth` feeds it: sourced, not fitted). Last run
(2026-12-02): 0.7361, 0.2832, 0.3660, 1.9010 ms a tensor, 0.5032 (per parameter, before:
2.4025 Gparam/s, 0.5041); with the two largest tiles
only: 0.7809, 0.3266, 0.3740, 2.4023, 0.5110.

Run: .venv/bin/python benchmarks/fit_step_model.py  (a few seconds; prints each value)
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tiersim.config.load import load_scenario
from tiersim.engine.simulate import simulate
from tiersim.state.resolved import resolve
from tiersim.workload.comms import alone_s
from tiersim.workload.work import build_workload

PUBLISHED = Path(__file__).resolve().parents[1] / "scenarios" / "published"
TABLE4_LAYER_S = 19.6e-3  # Korthikanti et al. 2022, Table 4, 22B, no recompute


def bisect(f: Callable[[float], float], target: float, lo: float, hi: float) -> float:
    """The x in [lo, hi] with f(x) = target, f monotone."""
    rising = f(hi) > f(lo)
    for _ in range(40):
        mid = (lo + hi) / 2
        if (f(mid) < target) == rising:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def _scenario(path: Path, sets: list[str]):
    return load_scenario(path, sets).scenario


def table4_layer_s(efficiency: float) -> float:
    sets = [
        "training.recompute=none",
        "parallel.sequence=false",
        f"hardware.gpu.efficiency={efficiency}",
    ]
    s = _scenario(PUBLISHED / "korthikanti2022-22b-full-recompute.yaml", sets)
    layer = build_workload(resolve(s)).units[0]
    return (
        layer.forward_s
        + layer.backward_s
        + alone_s(resolve(s), layer.tp_forward)
        + alone_s(resolve(s), layer.tp_backward)
    )


def step_s(name: str, key: str, value: float) -> float:
    return simulate(_scenario(PUBLISHED / name, [f"{key}={value}"])).time_s


def main() -> None:
    eta = bisect(table4_layer_s, TABLE4_LAYER_S, 0.3, 1.0)
    print(f"dgx-a100 gpu.efficiency (Table 4, 22B layer 19.6 ms): {eta:.4f}")
    smith = "smith2022-mtnlg-530b-280nodes.yaml"
    key = "parallel.pipeline_engine_overhead"
    over = bisect(lambda x: step_s(smith, key, x), 60.1, 0.0, 1.0)
    print(f"MT-NLG {key} (Smith 280 nodes, 60.1 s): {over:.4f}")
    zero2 = "ma2025-qwen2.5-1.5b-zero2.yaml"
    ma_eta = bisect(lambda x: step_s(zero2, "hardware.gpu.efficiency", x), 0.240, 0.05, 1.0)
    print(f"Ma 2025 gpu.efficiency (1.5B ZeRO-2, 240 ms): {ma_eta:.4f}")
    offload = "ma2025-qwen2.5-1.5b-zero-offload.yaml"
    per_tensor = bisect(
        lambda x: step_s(offload, "hardware.cpu.path_overhead_per_tensor", f"{x} ms"),
        1.365,
        0.0,
        10.0,
    )
    print(
        f"Ma 2025 cpu.path_overhead_per_tensor (1.5B offload, 1,365 ms; with the efficiency set "
        f"in the scenario): {per_tensor:.4f} ms a tensor of the rank's partition"
    )
    fig8 = PUBLISHED / "ren2021-zero-offload-1b.yaml"
    path = f"hardware.cpu.path_overhead_per_tensor={per_tensor} ms"  # one Python thread a rank

    def fig8_s(x: float) -> float:
        return simulate(_scenario(fig8, [path, f"hardware.gpu.efficiency={x}"])).time_s

    v100 = bisect(fig8_s, 136.05, 0.1, 1.0)
    print(f"dgx2 gpu.efficiency (ZeRO-Offload Fig. 8 1B, 136.05 s): {v100:.4f}")


if __name__ == "__main__":
    main()
