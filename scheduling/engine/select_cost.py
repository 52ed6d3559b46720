"""class_cost: the cheapest feasible set (best set), exact up to 20 eligible candidates."""

from __future__ import annotations

import numpy as np

from .cluster import BArr, FArr, IArr
from .placement import RequestView
from .select import (
    COST_EPS,
    EXACT_LIMIT,
    HEURISTIC_NODES,
    Selection,
    _Best,
    _by_cost,
    _node_fit,
    _search,
    feasible_with_all,
    open_entries,
)
from .select_bounds import lower_bounds, node_entries, pool_mask
from .select_multi import multi_node_best
from .select_pool import pool_potential, single_victim_slots


def select_class_cost(view: RequestView, pool: BArr, cost: FArr, start: FArr, bound: int | None,
                      value: float | None, cost_key: tuple[float, ...]) -> Selection:
    open_ents, open_slots = open_entries(view)
    member = pool[open_slots]
    ents = open_ents[member]  # what pool_entries(view, pool) gives, keeping the membership mask
    in_pool = pool_mask(view.cluster, ents)
    potential = pool_potential(view, member, ents, in_pool)
    if not len(ents) or not feasible_with_all(view, potential):
        return Selection(None, "NO_FEASIBLE_SET")
    rank = view.cluster.id_rank()
    eligible = int(pool.sum())  # the contract's "at most 20 eligible" is about this count
    if view.k == 1:
        best = _best_single_node(view, (ents, in_pool, pool), potential, cost, start, rank, bound, cost_key,
                                 eligible)
    else:
        best = multi_node_best(view, ents, potential, cost, start, rank, bound, eligible)
    if best.victims is None:
        return Selection(None, "EXCEEDS_MAX_VICTIMS")
    if value is not None and not best.cost < value - COST_EPS:
        return Selection(None, "COST_EXCEEDS_VALUE")
    return Selection(sorted(best.victims))


def _best_single_node(view: RequestView, pool_of: tuple[IArr, BArr, BArr], potential: BArr, cost: FArr,
                      start: FArr, rank: IArr, bound: int | None, cost_key: tuple[float, ...],
                      eligible: int) -> _Best:
    """``pool_of``: the pool's entries, them as a mask over every entry, the pool (over slots)."""
    cluster = view.cluster
    ents, in_pool, pool = pool_of
    best = _Best()
    if bound is not None and bound < 1:
        return best
    single = single_victim_slots(view, pool, potential)
    if len(single):
        has = np.zeros(cluster.slots, dtype=bool)
        has[single] = True  # the slots of those entries, in order, without sorting them
        s = np.flatnonzero(has)
        c = cost[s]
        tied = s[c <= c.min() + COST_EPS]
        pick = int(tied[np.lexsort((rank[tied], -start[tied], cost[tied]))[0]])
        best.victims, best.cost = [pick], float(cost[pick])
    if bound is not None and bound < 2:
        return best
    if not _shared_nodes(view) or int(np.bincount(cluster.e_node[ents]).max()) < 2:
        return best  # no node holds two pool victims: every bound below would be infinite
    # Sets of two or more: a node needing m victims costs at least its m cheapest candidates (m:
    # fewest that could free enough, taking the largest first, and at least two: where one large
    # victim would do, two small ones may cost less). Exact when few are eligible; above
    # EXACT_LIMIT the contract allows a heuristic: search only the most promising nodes.
    lower, fewest = lower_bounds(view, ents, in_pool, potential, cost, cost_key)
    reach = np.isfinite(lower)
    if best.victims is not None:  # the walk below stops at the first node bounded above the best
        reach &= lower <= best.cost + COST_EPS
    candidates = np.flatnonzero(reach)
    if eligible > EXACT_LIMIT and len(candidates) > HEURISTIC_NODES:
        # Only the first HEURISTIC_NODES in bound order are searched: sort the few that can be.
        cut = np.partition(lower[candidates], HEURISTIC_NODES - 1)[HEURISTIC_NODES - 1]
        candidates = candidates[lower[candidates] <= cut]
    order = candidates[np.lexsort((fewest[candidates], lower[candidates]))]
    if eligible > EXACT_LIMIT:
        order = order[:HEURISTIC_NODES]
    grouped, starts = node_entries(cluster)
    for node in order.tolist():
        if best.victims is not None and (lower[node] > best.cost + COST_EPS or (
                lower[node] > best.cost - COST_EPS and fewest[node] > len(best.victims))):
            break
        if bound is not None and fewest[node] > bound:
            continue
        here = grouped[starts[node]:starts[node + 1]]
        local = np.unique(cluster.e_alloc[here[in_pool[here]]]).tolist()
        best.steps = 0
        _search(_by_cost(local, cost, start, rank), cost, bound, best, start, rank,
                _node_fit(view, node, local))
    return best


def _shared_nodes(view: RequestView) -> bool:
    """Whether some node holds two of the shape's open entries (of which every pool is a part);
    cached per shape, so that a pass of single-entry nodes does not count each pool's again."""
    cluster = view.cluster

    def build() -> bool:
        nodes = cluster.e_node[open_entries(view)[0]]
        return bool(len(nodes)) and int(np.bincount(nodes).max()) >= 2

    result: bool = cluster.cached(("shared_nodes", view.shape_key), build)
    return result
