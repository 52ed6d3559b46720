"""priority: what a pool gives, kept per pool until the snapshot changes.

A pool's entries, the nodes where removing all of them would make the request fit (and what
they would free), and each such node's victims once the most important are given back depend
only on the snapshot, the request's shape and the pool. The last few pools of each shape are
kept (requests of other classes or vCluster draw other pools) and, from the nearest, only the
nodes whose pool entries differ are computed again: in a preempting pass each decision's
victims leave the next pool, on a few nodes. Every node is computed on its own, from its entries
in the same order either way, so a patched value is the very one a full computation gives.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .cluster import EPS, BArr, Cluster, FArr, IArr
from .placement import RequestView
from .select import open_entries

# Beyond this share of changed entries a full computation is cheaper than patching nodes.
_PATCH_SHARE = 0.05
# Pools kept per request shape (the most recently used last).
_POOLS_KEPT = 8

VictimsOf = Callable[[RequestView, IArr, FArr], IArr]


@dataclass(slots=True)
class PoolVictims:
    """A pool as priority reads it. ``victim_ents`` are grouped by node (ascending), most
    important first within a node; ``victim_nodes`` their nodes; ``top`` / ``count`` per node
    the highest victim priority (-1: none) and how many."""

    size: int
    potential: BArr
    freed: FArr
    victim_ents: IArr
    victim_nodes: IArr
    top: FArr
    count: FArr

    def slots_on(self, cluster: Cluster, node: int) -> list[int]:
        lo, hi = np.searchsorted(self.victim_nodes, [node, node + 1])
        return [int(x) for x in cluster.e_alloc[self.victim_ents[lo:hi]]]


def pool_victims(view: RequestView, pool: BArr, order: IArr, newest: bool, now: float,
                 victims_of: VictimsOf) -> PoolVictims:
    """``order``: the importance order of the shape's open entries (grouped by node)."""
    cluster = view.cluster
    ents, slots = open_entries(view)
    member = pool[slots]
    key = (view.shape_key, newest, now)
    memo: list[tuple[BArr, PoolVictims]] = cluster.cached(("priority_pools", *key), list)
    nearest, changed = None, None
    for i, (last, _) in enumerate(memo):
        differs = int(np.count_nonzero(member != last))
        if differs <= _PATCH_SHARE * max(1, len(ents)) and (changed is None or differs < len(changed)):
            nearest, changed = i, np.flatnonzero(member != last)
    if nearest is not None and changed is not None:
        _, kept = memo.pop(nearest)
        result = kept if not len(changed) else _patch(view, pool, (order, key), kept, ents[changed], victims_of)
    else:
        result = _full(view, ents[member], pool, order, victims_of)
        if len(memo) >= _POOLS_KEPT:
            memo.pop(0)
    memo.append((member, result))
    return result


def _sums(view: RequestView, ents: IArr, freed: FArr) -> None:
    """Add each node's amounts of the needed resources over ``ents`` (in their order) to ``freed``."""
    cluster = view.cluster
    n = len(cluster.node_names)
    nodes = cluster.e_node[ents]
    for r in view.need_idx.tolist():
        freed[:, r] += np.bincount(nodes, weights=cluster.e_res[ents, r], minlength=n)


def _potential(view: RequestView, freed: FArr, pool_count: IArr) -> BArr:
    """Nodes where removing every pool entry would make the request fit."""
    cluster = view.cluster
    ok = view.placeable & ~view.base_ok
    idx = view.need_idx
    if len(idx):
        ok &= np.all(view.free[:, idx] + freed[:, idx] + EPS >= view.need[idx], axis=1)
    if view.exclusive:
        ok &= pool_count == cluster.count
    result: BArr = ok
    return result


def _top_count(cluster: Cluster, victim_ents: IArr, victim_nodes: IArr, top: FArr, count: FArr) -> None:
    """Per node, the first of each node's run (most important first) and the run's length."""
    if len(victim_ents):
        first = np.flatnonzero(np.r_[True, victim_nodes[1:] != victim_nodes[:-1]])
        top[victim_nodes[first]] = cluster.a_prio[cluster.e_alloc[victim_ents[first]]]
        count[victim_nodes[first]] = np.diff(np.r_[first, len(victim_nodes)])


def _full(view: RequestView, ents: IArr, pool: BArr, order: IArr, victims_of: VictimsOf) -> PoolVictims:
    cluster = view.cluster
    n = len(cluster.node_names)
    freed = np.zeros((n, len(cluster.res_names)))
    _sums(view, ents, freed)
    counts = np.bincount(cluster.e_node[ents], minlength=n) if view.exclusive else np.zeros(0, dtype=np.int64)
    potential = _potential(view, freed, counts)
    ordered = order[pool[cluster.e_alloc[order]]]
    ordered = ordered[potential[cluster.e_node[ordered]]]
    victim_ents = victims_of(view, ordered, freed)
    victim_nodes = cluster.e_node[victim_ents]
    top, count = np.full(n, -1.0), np.zeros(n)
    _top_count(cluster, victim_ents, victim_nodes, top, count)
    return PoolVictims(len(ents), potential, freed, victim_ents, victim_nodes, top, count)


def _node_starts(cluster: Cluster, order: IArr, key: tuple[object, ...]) -> IArr:
    """Where each node's run starts in ``order`` (cached with it)."""
    def build() -> IArr:
        result: IArr = np.searchsorted(cluster.e_node[order], np.arange(len(cluster.node_names) + 1))
        return result

    result: IArr = cluster.cached(("priority_order_starts", *key), build)
    return result


def _patch(view: RequestView, pool: BArr, order_key: tuple[IArr, tuple[object, ...]], kept: PoolVictims,
           changed: IArr, victims_of: VictimsOf) -> PoolVictims:
    """``kept`` computed again on the nodes of the ``changed`` entries."""
    cluster = view.cluster
    order, key = order_key
    nodes = np.unique(cluster.e_node[changed])
    starts = _node_starts(cluster, order, key)
    lo, hi = starts[nodes], starts[nodes + 1]
    runs = hi - lo
    idx = np.repeat(lo - np.r_[0, np.cumsum(runs)[:-1]], runs) + np.arange(int(runs.sum()))
    here = order[idx]  # the shape's open entries on those nodes, by node, most important first
    here = here[pool[cluster.e_alloc[here]]]
    freed = kept.freed.copy()
    freed[nodes] = 0.0
    _sums(view, np.sort(here), freed)  # in entry order, as the full computation adds them
    counts = np.zeros(0, dtype=np.int64)
    if view.exclusive:
        counts = np.zeros(len(cluster.node_names), dtype=np.int64)
        counts[nodes] = np.bincount(cluster.e_node[here], minlength=len(cluster.node_names))[nodes]
    potential = kept.potential.copy()
    potential[nodes] = _potential(view, freed, counts)[nodes]
    ordered = here[potential[cluster.e_node[here]]]
    new_ents = victims_of(view, ordered, freed)
    new_nodes = cluster.e_node[new_ents]
    keep = ~np.isin(kept.victim_nodes, nodes)
    old_ents, old_nodes = kept.victim_ents[keep], kept.victim_nodes[keep]
    at = np.searchsorted(old_nodes, new_nodes)
    victim_ents = np.insert(old_ents, at, new_ents)
    victim_nodes = np.insert(old_nodes, at, new_nodes)
    top, count = kept.top.copy(), kept.count.copy()
    top[nodes], count[nodes] = -1.0, 0.0
    _top_count(cluster, new_ents, new_nodes, top, count)
    size = kept.size - int(np.count_nonzero(~pool[cluster.e_alloc[changed]])) \
        + int(np.count_nonzero(pool[cluster.e_alloc[changed]]))
    return PoolVictims(size, potential, freed, victim_ents, victim_nodes, top, count)
