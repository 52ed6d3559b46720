"""class_cost: lower bounds on the cost of freeing each node (single-node requests) and on the
victims a multi-node request needs (``victims_needed``).

These bounds serve the search for sets of two victims or more (single victims
are judged apart, each on its own). For each node, the fewest pool victims that
could make the request fit there (taking the largest amounts first), at least
two, and the sum of that many cheapest costs. A node where one large victim
would do can still have a cheaper pair of small ones, so it is bounded as any
other. A node whose bound exceeds the best set found so far is never searched.

Within one snapshot version the bounds change only where the pool changes
(victims chosen by earlier decisions of a pass stop being candidates), so the
bounds of the last few pools of each request shape are kept (requests of other
classes or vCluster draw other pools) and, from the nearest, only the nodes
whose pool entries changed are computed again. Both ways sum every node's entries in the
same order, so a patched bound is the very number a full computation gives.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .cluster import EPS, BArr, Cluster, FArr, IArr
from .placement import RequestView

_NONE = np.iinfo(np.int64).max
# Beyond this share of changed entries a full computation is cheaper than patching nodes.
_PATCH_SHARE = 0.05
# Pools whose bounds are kept per request shape (the most recently used last).
_POOLS_KEPT = 8
COVER_MARGIN = 1e-6  # victims_needed counts a node covered this much short of its deficit
_UNREACHABLE = np.iinfo(np.int64).max // 4  # a node no set of its candidates frees


def _node_sorted(cluster: Cluster, key: tuple[Any, ...], sort_keys: Any) -> tuple[IArr, IArr]:
    """Live entries grouped by node and ordered within each node, and where each node's run
    starts (cached: they depend on the snapshot only)."""
    live = cluster.live_entries()

    def build() -> tuple[IArr, IArr]:
        order: IArr = live[np.lexsort((*sort_keys(live), cluster.e_node[live]))]
        starts: IArr = np.searchsorted(cluster.e_node[order], np.arange(len(cluster.node_names) + 1))
        return order, starts

    result: tuple[IArr, IArr] = cluster.cached(key, build)
    return result


def amount_order(cluster: Cluster, r: int) -> tuple[IArr, IArr]:
    """By node, largest amount of resource ``r`` first."""
    return _node_sorted(cluster, ("amount_order", r), lambda live: (-cluster.e_res[live, r],))


def node_entries(cluster: Cluster) -> tuple[IArr, IArr]:
    """Live entries grouped by node (any order within a node)."""
    return _node_sorted(cluster, ("node_entries",), lambda live: ())


def cost_order(cluster: Cluster, cost: FArr, cost_key: tuple[float, ...]) -> tuple[IArr, IArr]:
    """By node, cheapest first."""
    return _node_sorted(cluster, ("cost_order", *cost_key), lambda live: (cost[cluster.e_alloc[live]],))


def _pick(order: tuple[IArr, IArr], mask: BArr, nodes: IArr | None) -> IArr:
    """The masked entries of ``order``, all or on ``nodes`` only, keeping the order."""
    entries, starts = order
    if nodes is not None:
        entries = np.concatenate([entries[starts[i]:starts[i + 1]] for i in nodes.tolist()]) if len(nodes) \
            else entries[:0]
    result: IArr = entries[mask[entries]]
    return result


def _positions(node_of: IArr) -> IArr:
    """1-based position of each entry within its node's run."""
    if not len(node_of):
        return np.zeros(0, dtype=np.int64)
    first = np.flatnonzero(np.r_[True, node_of[1:] != node_of[:-1]])
    runs = np.diff(np.r_[first, len(node_of)])
    result: IArr = np.arange(len(node_of)) - np.repeat(first, runs) + 1
    return result


def _compute(view: RequestView, mask: BArr, cost: FArr, cost_key: tuple[float, ...],
             nodes: IArr | None) -> tuple[FArr, IArr]:
    """Bounds from the masked entries, for every node or for ``nodes`` only (others left as
    if they had no entries)."""
    cluster = view.cluster
    n = len(cluster.node_names)
    fewest = np.zeros(n, dtype=np.int64)
    for r in view.need_idx.tolist():
        e = _pick(amount_order(cluster, r), mask, nodes)
        node_of = cluster.e_node[e]
        amounts = cluster.e_res[e, r]
        cum = np.cumsum(amounts)
        first = _positions(node_of) == 1
        within = cum - (cum - amounts)[first][np.cumsum(first) - 1]  # running sum within each node
        deficit = view.need[r] - view.free[node_of, r] - EPS
        enough = within >= deficit
        # Amounts come largest first, so a node's running sum only grows: the fewest victims is one
        # more than the entries still short, on nodes where the sum gets there at all.
        short = np.bincount(node_of[~enough], minlength=n)
        reached = np.bincount(node_of[enough], minlength=n) > 0
        fewest = np.maximum(fewest, np.where(reached, short + 1, _NONE))
    if view.exclusive:
        fewest = np.maximum(fewest, cluster.count)
    some = fewest >= 1  # zero where the node needs no victim at all
    fewest = np.maximum(fewest, 2)
    e = _pick(cost_order(cluster, cost, cost_key), mask, nodes)
    node_of = cluster.e_node[e]
    pos = _positions(node_of)
    take = pos <= fewest[node_of]
    # bincount adds each node's costs one by one in entry order: the same sum however many
    # other nodes are computed alongside.
    sums = np.bincount(node_of, weights=np.where(take, cost[cluster.e_alloc[e]], 0.0), minlength=n).astype(np.float64)
    count = np.bincount(node_of, minlength=n)
    lower: FArr = np.where(some & (count >= fewest), sums, np.inf)
    return lower, fewest


def pool_mask(cluster: Cluster, ents: IArr) -> BArr:
    """The pool's entries as a mask over every entry."""
    mask = np.zeros(len(cluster.e_alloc), dtype=bool)
    mask[ents] = True
    return mask


def lower_bounds(view: RequestView, ents: IArr, mask: BArr, potential: BArr, cost: FArr,
                 cost_key: tuple[float, ...]) -> tuple[FArr, IArr]:
    """Per node, for sets of two victims or more: the fewest victims that could make it fit (at
    least two), and the sum of that many cheapest costs (infinite where no such set can).
    ``mask`` is ``pool_mask(cluster, ents)``."""
    cluster = view.cluster
    # Kept until the snapshot changes (not on state-only changes), per request shape: the bounds
    # of the last few pools (requests of other classes or vCluster draw other pools from the same
    # shape), each patched where the next pool differs from it, when it differs little.
    memo: list[tuple[BArr, FArr, IArr]] = cluster.cached(
        ("bounds", tuple(view.need.tolist()), view.exclusive, cost_key), list)
    nearest, changed = None, None
    for i, last in enumerate(memo):
        if len(last[0]) == len(mask):
            differs = int(np.count_nonzero(mask != last[0]))
            if differs <= _PATCH_SHARE * max(1, len(ents)) and (changed is None or differs < len(changed)):
                nearest, changed = i, np.flatnonzero(mask != last[0])
    if nearest is not None and changed is not None:
        _, last_lower, last_fewest = memo.pop(nearest)
        lower, fewest = last_lower.copy(), last_fewest.copy()
        nodes = np.unique(cluster.e_node[changed])
        if len(nodes):
            part_lower, part_fewest = _compute(view, mask, cost, cost_key, nodes)
            lower[nodes], fewest[nodes] = part_lower[nodes], part_fewest[nodes]
    else:
        lower, fewest = _compute(view, mask, cost, cost_key, None)
        if len(memo) >= _POOLS_KEPT:
            memo.pop(0)
    memo.append((mask, lower, fewest))
    return np.where(potential, lower, np.inf), fewest


def victims_needed(view: RequestView, ents: IArr, cand: IArr, want: int) -> float:
    """A lower bound on the victims any set needs to make ``want`` of the nodes ``cand``
    (ascending) qualify: per node, the fewest of its candidates that could free enough (largest
    amounts first, per resource; all of them for an exclusive request), summed over the ``want``
    lowest nodes, and divided by the most nodes one candidate (a gang) is on. Infinite when fewer
    than ``want`` nodes could qualify at all. Every set the searches below could find has at least
    this many: above the bound, they would all find nothing, and are not run."""
    cluster = view.cluster
    on = np.zeros(len(cluster.node_names), dtype=bool)
    on[cand] = True
    mine = ents[on[cluster.e_node[ents]]]
    local = np.searchsorted(cand, cluster.e_node[mine])  # each entry's node, as a position in cand
    held = np.bincount(local, minlength=len(cand))
    if view.exclusive:
        fewest = np.where(held == cluster.count[cand], cluster.count[cand], _UNREACHABLE)
    else:
        fewest = np.zeros(len(cand), dtype=np.int64)
        for r in view.need_idx.tolist():
            amounts = cluster.e_res[mine, r]
            order = np.lexsort((-amounts, local))
            at, amounts = local[order], amounts[order]
            total = np.cumsum(amounts)
            first = np.flatnonzero(np.r_[True, at[1:] != at[:-1]]) if len(at) else at
            within = total - np.repeat((total - amounts)[first], np.diff(np.r_[first, len(at)]))
            deficit = view.need[r] - view.free[cand, r] - EPS
            # A margin against rounding: the searches subtract one amount at a time, this sums.
            enough = within >= deficit[at] - COVER_MARGIN
            short = np.bincount(at[~enough], minlength=len(cand))
            reached = np.bincount(at[enough], minlength=len(cand)) > 0
            fewest = np.maximum(fewest, np.where(deficit <= 0, 0, np.where(reached, short + 1, _UNREACHABLE)))
    lowest = np.sort(fewest)[:want]
    if int(lowest[-1]) >= _UNREACHABLE:
        return math.inf
    spread = int(np.bincount(cluster.e_alloc[mine]).max()) if len(mine) else 1
    return math.ceil(int(lowest.sum()) / spread)
