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


def pool_potential(view: RequestView, member: BArr, ents: IArr, in_pool: BArr) -> BArr:
    """``potential_nodes(view, ents)[0]`` for the pool's entries ``ents``: ``member`` tells which
    of ``open_entries(view)`` they are, ``in_pool`` marks them over every entry."""
    cluster = view.cluster
    memo: list[tuple[BArr, BArr, FArr, int]] = cluster.cached(("pool_potential", view.shape_key), list)
    nearest, changed = None, None
    limit = _PATCH_SHARE * max(1, len(ents))
    for i in range(len(memo) - 1, -1, -1):  # the latest first: in a pass, most often the nearest
        if abs(memo[i][3] - len(ents)) > limit:
            continue  # they differ in at least as many entries as in size (another class's pool)
        diff = member != memo[i][0]
        differs = int(np.count_nonzero(diff))
        if differs <= limit and (changed is None or differs < len(changed)):
            nearest, changed = i, np.flatnonzero(diff)
            if differs <= 1:
                break  # none can be nearer but an equal pool, which patches as little
    if nearest is not None and changed is not None:
        _, potential, freed, _ = memo.pop(nearest)
        if len(changed):
            potential, freed = _patch(view, in_pool, potential, freed, open_entries(view)[0][changed])
    else:
        potential, freed = potential_nodes(view, ents)
        if len(memo) >= _POOLS_KEPT:
            memo.pop(0)
    memo.append((member, potential, freed, len(ents)))
    return potential


def _patch(view: RequestView, in_pool: BArr, potential: BArr, freed: FArr, changed: IArr) -> tuple[BArr, FArr]:
    cluster = view.cluster
    nodes = np.unique(cluster.e_node[changed])
    grouped, starts = node_entries(cluster)  # by node, in entry order within a node
    lo, hi = starts[nodes], starts[nodes + 1]
    runs = hi - lo
    idx = np.repeat(lo - np.concatenate(([0], np.cumsum(runs)[:-1])), runs) + np.arange(int(runs.sum()))
    here = grouped[idx]
    here = here[in_pool[here]]
    on = cluster.e_node[here]
    freed = freed.copy()
    at = np.searchsorted(nodes, on)  # each entry's place among the changed nodes (sorted, unique)
    for r in view.need_idx.tolist():  # summed in entry order, as over every node
        freed[nodes, r] = np.bincount(at, weights=cluster.e_res[here, r], minlength=len(nodes))
    ok = view.placeable[nodes] & ~view.base_ok[nodes]
    idx_r = view.need_idx
    if len(idx_r):
        ok &= np.all(view.free[nodes][:, idx_r] + freed[nodes][:, idx_r] + EPS >= view.need[idx_r], axis=1)
    if view.exclusive:
        ok &= np.bincount(at, minlength=len(nodes)) == cluster.count[nodes]
    potential = potential.copy()
    potential[nodes] = ok
    return potential, freed


def alone_fits(view: RequestView) -> tuple[IArr, IArr]:
    """The slots and nodes of the shape's open entries whose allocation alone would make its node
    fit (cached per shape: every decision of a pass reads them again)."""
    cluster = view.cluster

    def build() -> tuple[IArr, IArr]:
        ents, _ = open_entries(view)
        nodes = cluster.e_node[ents]
        ok = np.ones(len(ents), dtype=bool)
        for r in view.need_idx.tolist():
            ok &= view.free[nodes, r] + cluster.e_res[ents, r] + EPS >= view.need[r]
        if view.exclusive:
            ok &= cluster.count[nodes] == 1
        alone = ents[ok]
        return cluster.e_alloc[alone], cluster.e_node[alone]

    result: tuple[IArr, IArr] = cluster.cached(("alone_fits", view.shape_key), build)
    return result


def single_victim_slots(view: RequestView, pool: BArr, potential: BArr) -> IArr:
    """The pool's slots with an entry that alone would make its (potential) node fit."""
    slots, nodes = alone_fits(view)
    result: IArr = slots[pool[slots] & potential[nodes]]
    return result
