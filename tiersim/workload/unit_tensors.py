"""Each unit's parameter tensors as its backward hands their gradients over, one GPU's
elements each (after tensor, expert and pipeline division): what DeepSpeed's gradient bucket
is filled with, tensor by tensor (workload/gradient_buckets.py).

The tensors are the model's (state/inventory.py `rank_matrices`: every weight matrix, bias
and norm vector of each layer as listed, then the stage's rest), each of a Matrix's `count`
one tensor. A unit's backward produces them in the reverse of the listed order (the listing
is the forward's: attention's projections, the MLP's, the norms), as v0.3's bucket count
takes them (workload/reduce_buckets.py `bucket_reduces`). The order inside a unit decides
only where a bucket boundary falls in it: the engine issues a unit's reductions at its
backward's end however its tensors are ordered.

How the units cut the layers' tensors: a layer is one unit; or the rest of the layer and its
routed experts where those are placed apart (work.py `_layer_units`: the tensors not marked
`expert`, then those that are); or DeepSpeed's submodules and tiles (workload/fetch.py
`fetch_units`: consecutive parts of the listed tensors, a tile a part of one tensor, taken
here as a tensor of its own, as DeepSpeed's TiledLinear makes each tile a parameter). A unit
whose parts do not add up to its parameters this way counts as one tensor of them all.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from tiersim.state.inventory import rank_matrices

if TYPE_CHECKING:
    from tiersim.state.layers import Matrix
    from tiersim.state.resolved import Resolved
    from tiersim.workload.unit import Unit


def unit_tensors(r: Resolved, units: Sequence[Unit], stage: int, model=None) -> list[list[int]]:
    """Each unit's gradient tensors (elements) in the order its backward produces them
    (module docstring); `units`: the stage's, its layers' then its rest."""
    groups = rank_matrices(r, stage, model)
    out = [[u.params] for u in units]  # one tensor of the unit's elements where not known
    layers, n = len(units) - 1, len(groups) - 1
    if units:
        out[-1] = _checked(units[-1], _sizes(groups[-1]))
    if n < 1 or layers < n or layers % n:
        return out
    per = layers // n
    for k, group in enumerate(groups[:-1]):
        parts = units[k * per : (k + 1) * per]
        for j, (unit, sizes) in enumerate(zip(parts, _cut(group, parts), strict=True)):
            out[k * per + j] = _checked(unit, sizes)
    return out


def _sizes(mats: Sequence[Matrix]) -> list[int]:
    return [m.rows * m.cols for m in mats for _ in range(m.count) if m.rows * m.cols]


def _checked(unit: Unit, sizes: list[int]) -> list[int]:
    """The sizes in backward's order where they are the unit's parameters, else one tensor."""
    return sizes[::-1] if sum(sizes) == unit.params else [unit.params]


def _cut(mats: Sequence[Matrix], parts: Sequence[Unit]) -> list[list[int]]:
    """The layer's tensors (listed order) shared out to its units."""
    if len(parts) == 1:
        return [_sizes(mats)]
    if len(parts) == 2 and parts[1].name.endswith(".experts"):
        return [_sizes([m for m in mats if not m.expert]), _sizes([m for m in mats if m.expert])]
    return consecutive(_sizes(mats), [p.params for p in parts])


def consecutive(sizes: Sequence[int], parts: Sequence[int]) -> list[list[int]]:
    """`sizes` cut into consecutive parts of `parts` elements each, a tensor that crosses a
    cut split there (a tile of it in each part)."""
    out: list[list[int]] = []
    i, left = 0, sizes[0] if sizes else 0
    for want in parts:
        part: list[int] = []
        while want > 0 and i < len(sizes):
            take = min(want, left)
            part.append(take)
            want, left = want - take, left - take
            if left == 0:
                i += 1
                left = sizes[i] if i < len(sizes) else 0
        out.append(part)
    return out
