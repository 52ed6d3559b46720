"""class_cost: a pool's potential nodes and its single victims, without reading every entry.

The nodes where removing every pool entry would make the request fit depend only on the
snapshot, the request's shape and the pool: the last few pools of each shape are kept until the
snapshot changes and, from the nearest, only the nodes whose pool entries differ are summed
again (in a preempting pass each decision's victims leave the next pool, on a few nodes). Each
node's sum adds its entries in entry order either way, so a patched value is the very one a full
computation gives. The entries whose allocation alone would make its node fit do not depend on
the pool at all: kept per shape, a decision keeps those of its pool.
"""

from __future__ import annotations

import numpy as np

from .cluster import EPS, BArr, FArr, IArr
from .placement import RequestView
from .select import open_entries, potential_nodes
from .select_bounds import node_entries

# Beyond this share of changed entries a full computation is cheaper than patching nodes.
_PATCH_SHARE = 0.05
# Pools kept per request shape (the most recently used last).
_POOLS_KEPT = 8


def pool_potential(view: RequestView, pool: BArr, ents: IArr, in_pool: BArr) -> BArr:
    """``potential_nodes(view, ents)[0]`` for the pool's entries ``ents`` (``in_pool``: them as a
    mask over every entry)."""
    cluster = view.cluster
    _, slots = open_entries(view)
    member = pool[slots]
    memo: list[tuple[BArr, BArr, FArr]] = cluster.cached(("pool_potential", view.shape_key), list)
    nearest, changed = None, None
    for i, (last, _, _) in enumerate(memo):
        differs = int(np.count_nonzero(member != last))
        if differs <= _PATCH_SHARE * max(1, len(ents)) and (changed is None or differs < len(changed)):
            nearest, changed = i, np.flatnonzero(member != last)
    if nearest is not None and changed is not None:
        _, potential, freed = memo.pop(nearest)
        if len(changed):
            potential, freed = _patch(view, in_pool, potential, freed, open_entries(view)[0][changed])
    else:
        potential, freed = potential_nodes(view, ents)
        if len(memo) >= _POOLS_KEPT:
            memo.pop(0)
    memo.append((member, potential, freed))
    return potential


def _patch(view: RequestView, in_pool: BArr, potential: BArr, freed: FArr, changed: IArr) -> tuple[BArr, FArr]:
    cluster = view.cluster
    n = len(cluster.node_names)
    nodes = np.unique(cluster.e_node[changed])
    grouped, starts = node_entries(cluster)  # by node, in entry order within a node
    lo, hi = starts[nodes], starts[nodes + 1]
    runs = hi - lo
    idx = np.repeat(lo - np.r_[0, np.cumsum(runs)[:-1]], runs) + np.arange(int(runs.sum()))
    here = grouped[idx]
    here = here[in_pool[here]]
    on = cluster.e_node[here]
    freed = freed.copy()
    for r in view.need_idx.tolist():
        freed[nodes, r] = np.bincount(on, weights=cluster.e_res[here, r], minlength=n)[nodes]
    ok = view.placeable[nodes] & ~view.base_ok[nodes]
    idx_r = view.need_idx
    if len(idx_r):
        ok &= np.all(view.free[nodes][:, idx_r] + freed[nodes][:, idx_r] + EPS >= view.need[idx_r], axis=1)
    if view.exclusive:
        ok &= np.bincount(on, minlength=n)[nodes] == cluster.count[nodes]
    potential = potential.copy()
    potential[nodes] = ok
    return potential, freed


def alone_fits(view: RequestView) -> IArr:
    """The shape's open entries whose allocation alone would make its node fit (cached per shape)."""
    cluster = view.cluster

    def build() -> IArr:
        ents, _ = open_entries(view)
        nodes = cluster.e_node[ents]
        ok = np.ones(len(ents), dtype=bool)
        for r in view.need_idx.tolist():
            ok &= view.free[nodes, r] + cluster.e_res[ents, r] + EPS >= view.need[r]
        if view.exclusive:
            ok &= cluster.count[nodes] == 1
        result: IArr = ents[ok]
        return result

    result: IArr = cluster.cached(("alone_fits", view.shape_key), build)
    return result


def single_victim_slots(view: RequestView, pool: BArr, potential: BArr) -> IArr:
    """The pool's slots with an entry that alone would make its (potential) node fit."""
    cluster = view.cluster
    alone = alone_fits(view)
    slots = cluster.e_alloc[alone]
    result: IArr = slots[pool[slots] & potential[cluster.e_node[alone]]]
    return result
