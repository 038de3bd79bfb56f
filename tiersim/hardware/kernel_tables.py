"""Measured kernel rates of a GPU, read from its kernel table (a data file per GPU, as
Calculon's systems/: tiersim/presets/kernels/<name>.yaml, named by a hardware preset's
`gpu.kernels`), and looked up by shape.

A table holds published measurements of the kernels themselves (docs/kernels.md says what each
GPU's rests on), never a fit to a training run:
- `gemm.<dtype>`: dense GEMM rates. With a `grid`, TFLOP/s measured at every (m, n, k) of the
  grid; a shape between grid points takes the rate interpolated linearly in log2 of each size
  (trilinear), and a size outside the grid is held at its edge (a larger GEMM runs at the
  largest measured one's rate; a smaller one at the smallest's, which flatters it). Without a
  grid, the `best` measured rate (maximum achievable matmul FLOPS) shaped by wave
  quantization over the GPU's SMs (tiersim.hardware.gemm, the two largest cuBLAS tiles).
  `shape_of: bf16` gives a dtype BF16's shape dependence at its own measured level:
  BF16's rate x best / BF16's best; with `k_scale` the shape is BF16's at k x k_scale (FP8's
  0.5: an FP8 tile's K-loop does twice BF16's K in a step's time and its operands' bytes are
  BF16's at half the K, so its fixed per-tile work weighs as in a BF16 GEMM of half the K;
  DeepGEMM's measured FP8 rates fall with K as that says, tests/test_kernel_tables.py). A
  batched GEMM (attention's products per head) is looked
  up as one of batch x m rows: its tiles are as many.
- `fp8_recipes`: each FP8 scaling recipe's GEMM rate as a share of the tensorwise rate.
- `sustained`: by dtype, the share of its best isolated rate a kernel can keep when the GPU
  runs tensor-core kernels back to back at its power limit: a GEMM runs at the lesser of its
  isolated rate and share x the dtype's `best`, and (with BF16's share) a fused attention
  kernel at the lesser of its rate and share x that kernel's best measured rate in the same
  direction. A ceiling, not a uniform factor: at the power limit the clock falls until the
  kernel's power fits, so a shape whose burst draws less than the limit keeps its rate
  (mamf-finder's K walk on an H200: 2816x1536x4096 holds its 722 TFLOP/s at the 1980 MHz
  ceiling, below 700 W, where K 6144 settles at 1879 MHz and 685 W, docs/kernels.md). The
  shipped shares are mamf-finder's sustained over burst rate (MSMF / MAMF) of the GPU;
  `tiersim calibrate` measures one as the last over the first samples of back-to-back GEMMs
  at the grid's largest square, its `best`. Memory-bound kernels run on the HBM's clock and
  keep theirs. No `sustained`: the isolated rates.
- `fp8_quantize`: by FP8 recipe, the share of HBM bandwidth its quantize kernels reach where
  measured on the GPU (tiersim/workload/fp8.py); a recipe not listed runs at the memory-bound
  kernels' `gpu.memory_efficiency`.
- `grouped_gemm`: a grouped GEMM's (a mixture-of-experts layer's routed experts) rate as a
  share of the dense GEMM's, by rows a group, interpolated in log2 and held at the edges; with
  `k`, a row of shares by the GEMM's contraction K (an expert's up / gate projection contracts
  over the hidden size, its down projection over the expert's width), interpolated in log2 of
  K between them and held at the edges.
- `attention.<kernel>`: fused attention rates by head dimension and sequence length, forward
  and backward, causal or full, as FlashAttention counts FLOPs (4·s²·d per head forward, half
  of it causal; the backward 2.5x the forward's). Interpolated linearly in log2 of the sequence
  length and of the head dimension, held at the edges. A backward not measured for a mask or
  head dimension takes the measured backward's rate times the forward's ratio between the two
  (the backward of the same kernel scales with its forward). A mask not measured at all
  takes the measured mask's rates (the B200's and GB200's FlashAttention-2 are measured causal
  only: a context-parallel ring's full-mask steps run at the causal rates, slow where the
  diagonal's tiles weigh). A kernel may give its own `seq` (eager attention's stops where the
  score matrix no longer fits).
- `attention.eager`: eager attention's op set (QK^T by baddbmm, softmax, PV by bmm; the
  scores in HBM) timed whole, in the same FLOP count (tiersim/workload/eager_attention.py).
  Mostly memory-bound, so no sustained ceiling holds it (its GEMMs, at K = head_dim, run far
  below the GEMM ceiling; the HBM keeps its clock), and `hbm_tb_s` says the HBM bandwidth it
  was measured through: a GPU with other HBM (an H200 on the H100's table) does not take it.
"""

from __future__ import annotations

import bisect
import functools
import math
from dataclasses import field
from pathlib import Path
from typing import Any

from tiersim.config.presets import is_preset_file, load_preset, preset_names
from tiersim.config.yamlfile import read_yaml
from tiersim.core.records import record
from tiersim.hardware.gemm import wave_efficiency

TERA = 1e12
# dtypes that share a table: fp16 runs on the same tensor-core paths at BF16's rate
TABLE_DTYPE = {"bf16": "bf16", "fp16": "bf16", "fp8": "fp8"}
UNHELD_ATTENTION = ("eager",)  # memory-bound mostly: no sustained ceiling (module docstring)


def table_names() -> list[str]:
    """The shipped kernel tables (tiersim/presets/kernels)."""
    return preset_names("kernels")


def _merged(base: dict[str, Any], own: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in own.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merged(out[key], value)
        else:
            out[key] = value
    return out


def _raw(name: str) -> dict[str, Any]:
    """A table by its shipped name, or a file of one (`tiersim calibrate --kernels-out`)."""
    if is_preset_file(name):
        data = dict(read_yaml(Path(name), name))
    else:
        data = load_preset("kernels", name)
    base = data.pop("base", None)
    return _merged(_raw(base), data) if base else data


def _axis_position(axis: tuple[float, ...], x: float) -> tuple[int, int, float]:
    """The two grid indices around x and x's weight on the second, in log2 of the sizes;
    held at the edges."""
    if x <= axis[0]:
        return 0, 0, 0.0
    if x >= axis[-1]:
        last = len(axis) - 1
        return last, last, 0.0
    hi = bisect.bisect_right(axis, x)
    lo = hi - 1
    w = (math.log2(x) - math.log2(axis[lo])) / (math.log2(axis[hi]) - math.log2(axis[lo]))
    return lo, hi, w


def _interp1(axis: tuple[float, ...], values: tuple[float, ...], x: float) -> float:
    lo, hi, w = _axis_position(axis, x)
    return values[lo] * (1 - w) + values[hi] * w


@record
class GemmTable:
    """One dtype's GEMM rates: a measured grid (TFLOP/s at [m][n][k]) and/or the best rate."""

    best: float  # TFLOP/s
    grid: tuple[float, ...] = ()
    tflops: tuple[tuple[tuple[float, ...], ...], ...] = ()
    scale: float = 1.0  # applied to the grid's rates (a dtype with another's shape)
    k_scale: float = 1.0  # the grid looked up at k x k_scale (FP8 on BF16's shape: 0.5)

    def tflops_at(self, m: float, n: float, k: float, sm_count: int | None) -> float:
        """TFLOP/s of an (m x k)·(k x n) GEMM (module docstring)."""
        if not self.grid:
            share = wave_efficiency(max(1, int(m)), max(1, int(n)), 1, sm_count)
            return self.best * share
        k = k * self.k_scale
        (m0, m1, wm), (n0, n1, wn), (k0, k1, wk) = (_axis_position(self.grid, x) for x in (m, n, k))
        rate = 0.0
        for i, wi in ((m0, 1 - wm), (m1, wm)):
            for j, wj in ((n0, 1 - wn), (n1, wn)):
                for q, wq in ((k0, 1 - wk), (k1, wk)):
                    rate += wi * wj * wq * self.tflops[i][j][q]
        return rate * self.scale


@record
class AttentionTable:
    """One fused attention kernel's rates: direction -> mask -> head dim -> TFLOP/s by seq."""

    seq: tuple[float, ...]
    rates: dict[str, dict[str, dict[int, tuple[float, ...]]]]
    hbm: float | None = None  # bytes/s of the HBM it was measured through, where it says

    def _measured(self, direction: str, mask: str, head_dim: int, seq: float) -> float | None:
        by_dim = self.rates.get(direction, {}).get(mask)
        if not by_dim:
            return None
        dims = tuple(sorted(by_dim))
        per_dim = tuple(_interp1(self.seq, by_dim[d], seq) for d in dims)
        return _interp1(dims, per_dim, head_dim)

    def best(self, direction: str) -> float:
        """The highest rate measured in `direction`, any mask, head dimension or length."""
        return max(v for dims in self.rates[direction].values() for r in dims.values() for v in r)

    def tflops(self, direction: str, causal: bool, head_dim: int, seq: float) -> float:
        mask = "causal" if causal else "full"
        forward = self._measured("forward", mask, head_dim, seq)
        if forward is None:  # the mask not measured: the other's rates (module docstring)
            mask = "full" if causal else "causal"
            forward = self._measured("forward", mask, head_dim, seq)
        if forward is None:
            raise KeyError("no forward measurement")
        if direction == "forward":
            return forward
        own = self.rates.get("backward", {}).get(mask, {})
        if head_dim in own:
            return _interp1(self.seq, own[head_dim], seq)
        # the measured backward (full mask, its nearest head dimension) x the forward's ratio
        ref_mask = "full" if self.rates["backward"].get("full") else "causal"
        ref_dims = sorted(self.rates["backward"][ref_mask])
        ref_dim = min(ref_dims, key=lambda d: abs(math.log2(d) - math.log2(head_dim)))
        ref_bwd = _interp1(self.seq, self.rates["backward"][ref_mask][ref_dim], seq)
        ref_fwd = self._measured("forward", ref_mask, ref_dim, seq)
        return ref_bwd * forward / ref_fwd


@record
class KernelTable:
    name: str
    gemm: dict[str, GemmTable]
    fp8_recipes: dict[str, float] = field(default_factory=dict)
    attention: dict[str, AttentionTable] = field(default_factory=dict)
    grouped_rows: tuple[float, ...] = ()  # rows a group (a grouped GEMM's tokens per expert)
    # the dense rate's share at those rows: one row, or one a contraction K of grouped_k
    grouped_share: tuple[tuple[float, ...], ...] = ()
    grouped_k: tuple[float, ...] = ()
    sustained: dict[str, float] = field(default_factory=dict)  # dtype -> share kept (docstring)
    quantize_share: dict[str, float] = field(default_factory=dict)  # FP8 recipe -> HBM share

    def sustained_share(self, dtype: str) -> float:
        """The share of `dtype`'s isolated rate kept under sustained load (1: not measured)."""
        return self.sustained.get(TABLE_DTYPE.get(dtype, dtype), 1.0)

    def grouped_gemm_share(self, rows: float, k: float | None = None) -> float:
        """A grouped GEMM's rate over the dense one's at `rows` a group and contraction `k`
        (each interpolated in log2, held at the edges; `k` where the table measures by it);
        1 where the table measures none."""
        if not self.grouped_rows:
            return 1.0
        by_k = [_interp1(self.grouped_rows, row, max(1.0, rows)) for row in self.grouped_share]
        if not self.grouped_k:
            return by_k[0]
        if k is None:
            raise ValueError(f"kernel table {self.name}: grouped GEMM shares need the K")
        return _interp1(self.grouped_k, tuple(by_k), k)

    def gemm_rate(
        self, dtype: str, m: float, n: float, k: float, sm_count: int | None, recipe: str = ""
    ) -> float | None:
        """FLOP/s of an (m x k)·(k x n) GEMM in `dtype` (None: the table has no such dtype);
        an FP8 GEMM at `recipe`'s share of the tensorwise rate."""
        table = self.gemm.get(TABLE_DTYPE.get(dtype, dtype))
        if table is None:
            return None
        rate = table.tflops_at(m, n, k, sm_count) * (self.fp8_recipes[recipe] if recipe else 1.0)
        return self.held(dtype, rate, table.best) * TERA

    def held(self, dtype: str, rate: float, best: float) -> float:
        """`rate` (TFLOP/s) of a `dtype` kernel whose family's best isolated rate is `best`,
        under sustained load: at most the sustained share of `best` (module docstring)."""
        key = TABLE_DTYPE.get(dtype, dtype)
        return min(rate, self.sustained[key] * best) if key in self.sustained else rate

    def best_rate(self, dtype: str) -> float | None:
        """FLOP/s of the best measured GEMM in `dtype` (None: not in the table), held to the
        sustained ceiling."""
        table = self.gemm.get(TABLE_DTYPE.get(dtype, dtype))
        return None if table is None else self.held(dtype, table.best, table.best) * TERA

    def attention_rate(
        self, kernel: str, direction: str, causal: bool, head_dim: int, seq: float
    ) -> float | None:
        """FLOP/s of `kernel`'s fused attention (FlashAttention's FLOP count); None: the table
        has no measurement of that kernel."""
        table = self.attention.get(kernel)
        if table is None:
            return None
        rate = table.tflops(direction, causal, head_dim, seq)
        if kernel in UNHELD_ATTENTION:
            return rate * TERA
        return self.held("bf16", rate, table.best(direction)) * TERA


def _gemm_tables(raw: dict[str, Any]) -> dict[str, GemmTable]:
    out: dict[str, GemmTable] = {}
    for dtype, entry in raw.items():
        if "shape_of" in entry:
            continue
        grid = tuple(float(x) for x in entry.get("grid", ()))
        rates = tuple(
            tuple(tuple(float(v) for v in row) for row in plane)
            for plane in entry.get("tflops", ())
        )
        out[dtype] = GemmTable(float(entry["best"]), grid, rates)
    for dtype, entry in raw.items():
        if "shape_of" in entry:
            like = out[entry["shape_of"]]
            best = float(entry["best"])
            k_scale = float(entry.get("k_scale", 1.0))
            out[dtype] = GemmTable(best, like.grid, like.tflops, best / like.best, k_scale)
    return out


def _attention_tables(raw: dict[str, Any]) -> dict[str, AttentionTable]:
    raw = dict(raw)
    shared = tuple(float(s) for s in raw.pop("seq", ()))
    out = {}
    for kernel, entry in raw.items():
        directions = dict(entry)
        own = directions.pop("seq", None)  # a kernel's own lengths (eager's)
        seq = shared if own is None else tuple(float(s) for s in own)
        hbm = directions.pop("hbm_tb_s", None)
        rates = {
            direction: {
                mask: {int(d): tuple(float(v) for v in vals) for d, vals in dims.items()}
                for mask, dims in masks.items()
            }
            for direction, masks in directions.items()
        }
        out[kernel] = AttentionTable(seq, rates, None if hbm is None else float(hbm) * TERA)
    return out


def _grouped(raw: dict[str, Any]) -> dict[str, tuple]:
    """`grouped_gemm`'s rows, shares (a row, or a row a K) and K axis, as KernelTable's."""
    share = raw.get("share", ())
    rows = [share] if share and not isinstance(share[0], list) else share
    return {
        "grouped_rows": tuple(float(x) for x in raw.get("rows", ())),
        "grouped_share": tuple(tuple(float(x) for x in row) for row in rows),
        "grouped_k": tuple(float(x) for x in raw.get("k", ())),
    }


@functools.cache
def kernel_table(name: str) -> KernelTable:
    """The kernel table `name`, shipped or a YAML file (KeyError: no such shipped table),
    parsed once."""
    raw = _raw(name)
    return KernelTable(
        name=raw.get("name", name),
        gemm=_gemm_tables(raw.get("gemm", {})),
        fp8_recipes={k: float(v) for k, v in raw.get("fp8_recipes", {}).items()},
        attention=_attention_tables(raw.get("attention", {})),
        **_grouped(raw.get("grouped_gemm", {})),
        sustained={k: float(v) for k, v in raw.get("sustained", {}).items()},
        quantize_share={k: float(v) for k, v in raw.get("fp8_quantize", {}).items()},
    )
