"""class_cost: the cheapest feasible set (best set), exact up to 20 eligible candidates."""

from __future__ import annotations

import numpy as np

from .cluster import EPS, BArr, FArr, IArr
from .placement import RequestView, give_back
from .select import (
    COST_EPS,
    EXACT_LIMIT,
    HEURISTIC_NODES,
    STEP_BUDGET,
    Selection,
    _Best,
    _better,
    _by_cost,
    _entry_mask,
    _node_fit,
    _search,
    feasible_with_all,
    pool_entries,
    potential_nodes,
)


def select_class_cost(view: RequestView, pool: BArr, cost: FArr, start: FArr, bound: int | None,
                      value: float | None, cost_key: tuple[float, float]) -> Selection:
    ents = pool_entries(view, pool)
    potential, _ = potential_nodes(view, ents)
    if not len(ents) or not feasible_with_all(view, potential):
        return Selection(None, "NO_FEASIBLE_SET")
    rank = view.cluster.id_rank()
    eligible = int(pool.sum())  # the contract's "at most 20 eligible" is about this count
    if view.k == 1:
        best = _best_single_node(view, ents, potential, cost, start, rank, bound, cost_key, eligible)
    else:
        best = _Best()
        if eligible <= EXACT_LIMIT:
            slots = np.unique(view.cluster.e_alloc[ents]).tolist()
            _search(_by_cost(slots, cost, start, rank), cost, bound, best, start, rank, view.feasible)
        if best.victims is None and (eligible > EXACT_LIMIT or best.steps > STEP_BUDGET):
            best = _greedy_by_node(view, ents, potential, cost, start, rank, bound)
    if best.victims is None:
        return Selection(None, "EXCEEDS_MAX_VICTIMS")
    if value is not None and not best.cost < value - COST_EPS:
        return Selection(None, "COST_EXCEEDS_VALUE")
    return Selection(sorted(best.victims))


def _cost_order(view: RequestView, cost: FArr, key: tuple[float, float]) -> IArr:
    """Live entries grouped by node, cheapest first (cached: cost depends on the snapshot only)."""
    cluster = view.cluster
    live = cluster.live_entries()

    def build() -> IArr:
        order = np.lexsort((cost[cluster.e_alloc[live]], cluster.e_node[live]))
        result: IArr = live[order]
        return result

    result: IArr = cluster.cached(("cost_order", *key), build)
    return result


def _best_single_node(view: RequestView, ents: IArr, potential: BArr, cost: FArr, start: FArr, rank: IArr,
                      bound: int | None, cost_key: tuple[float, float], eligible: int) -> _Best:
    cluster = view.cluster
    best = _Best()
    if bound is not None and bound < 1:
        return best
    slots = cluster.e_alloc[ents]
    single = _single_victim_entries(view, ents, potential)
    if single.any():
        s = np.unique(slots[single])
        c = cost[s]
        tied = s[c <= c.min() + COST_EPS]
        pick = min(tied.tolist(), key=lambda x: (float(cost[x]), -float(start[x]), int(rank[x])))
        best.victims, best.cost = [pick], float(cost[pick])
    if bound is not None and bound < 2:
        return best
    # A node needing m victims costs at least its m cheapest candidates (m: fewest that could
    # free enough, taking the largest first). Exact when few are eligible; above EXACT_LIMIT the
    # contract allows a heuristic: search only the most promising nodes.
    lower, fewest = _lower_bounds(view, ents, potential, cost, cost_key)
    candidates = np.flatnonzero(np.isfinite(lower) & (fewest >= 2))
    order = candidates[np.lexsort((fewest[candidates], lower[candidates]))]
    if eligible > EXACT_LIMIT:
        order = order[:HEURISTIC_NODES]
    nodes_of = cluster.e_node[ents]
    for node in order.tolist():
        if best.victims is not None and (lower[node] > best.cost + COST_EPS or (
                lower[node] > best.cost - COST_EPS and fewest[node] > len(best.victims))):
            break
        if bound is not None and fewest[node] > bound:
            continue
        local = np.unique(slots[nodes_of == node]).tolist()
        best.steps = 0
        _search(_by_cost(local, cost, start, rank), cost, bound, best, start, rank,
                _node_fit(view, node, local))
    return best


def _single_victim_entries(view: RequestView, ents: IArr, potential: BArr) -> BArr:
    """Entries whose allocation alone would make its node fit."""
    cluster = view.cluster
    nodes = cluster.e_node[ents]
    idx = view.need_idx
    single: BArr = potential[nodes].copy()
    if len(idx):
        single &= np.all(view.free[nodes][:, idx] + cluster.e_res[ents][:, idx] + EPS >= view.need[idx], axis=1)
    if view.exclusive:
        single &= cluster.count[nodes] == 1
    return single


def _lower_bounds(view: RequestView, ents: IArr, potential: BArr, cost: FArr,
                  cost_key: tuple[float, float]) -> tuple[FArr, IArr]:
    """Per node: the fewest victims that could make it fit, and the sum of that many cheapest costs."""
    cluster = view.cluster
    n = len(cluster.node_names)
    mask = _entry_mask(cluster, ents)
    fewest = np.zeros(n, dtype=np.int64)
    for r in view.need_idx.tolist():
        e = ents[np.lexsort((-cluster.e_res[ents, r], cluster.e_node[ents]))]
        nodes = cluster.e_node[e]
        first = np.r_[True, nodes[1:] != nodes[:-1]] if len(nodes) else np.zeros(0, dtype=bool)
        seg = np.cumsum(first) - 1
        cum = np.cumsum(cluster.e_res[e, r])
        within = cum - np.r_[0.0, cum][np.flatnonzero(first)][seg]
        deficit = view.need[r] - view.free[nodes, r] - EPS
        enough = within >= deficit
        pos = np.arange(len(e)) - np.flatnonzero(first)[seg] + 1
        need_r = np.full(n, np.iinfo(np.int64).max)
        np.minimum.at(need_r, nodes[enough], pos[enough])
        fewest = np.maximum(fewest, need_r)
    if view.exclusive:
        fewest = np.maximum(fewest, cluster.count)
    order = _cost_order(view, cost, cost_key)
    ordered = order[mask[order]]
    onode = cluster.e_node[ordered]
    first = np.r_[True, onode[1:] != onode[:-1]] if len(onode) else np.zeros(0, dtype=bool)
    seg = np.cumsum(first) - 1
    cum = np.cumsum(cost[cluster.e_alloc[ordered]])
    within = cum - np.r_[0.0, cum][np.flatnonzero(first)][seg]
    pos = np.arange(len(ordered)) - np.flatnonzero(first)[seg] + 1
    lower = np.full(n, np.inf)
    hit = pos == fewest[onode]
    lower[onode[hit]] = within[hit]
    lower[~potential] = np.inf
    return lower, fewest


def _greedy_by_node(view: RequestView, ents: IArr, potential: BArr, cost: FArr, start: FArr, rank: IArr,
                    bound: int | None) -> _Best:
    """Heuristic for many candidates: free the cheapest nodes, then trim what is not needed."""
    cluster = view.cluster
    nodes = cluster.e_node[ents]
    slots = cluster.e_alloc[ents]
    single = _single_victim_entries(view, ents, potential)
    n = len(cluster.node_names)
    whole = np.bincount(nodes, weights=cost[slots], minlength=n)  # every candidate on the node
    local = np.where(potential, whole, np.inf)
    single_cost = np.full(n, np.inf)
    np.minimum.at(single_cost, nodes[single], cost[slots[single]])
    local = np.minimum(local, single_cost)
    best = _Best()
    for g in view.groups.tolist():
        want = view.k - int(view.base_count[g]) - int(view.lendable_cap[g])
        cand = np.flatnonzero(potential & (view.group == g))
        if want <= 0 or len(cand) < want:
            continue
        chosen = cand[np.argsort(local[cand], kind="stable")[:want]]
        victims: set[int] = set()
        for node in chosen.tolist():
            here = nodes == node
            on_slots = slots[here]
            if single_cost[node] <= local[node]:
                cheapest = on_slots[single[here] & (cost[on_slots] <= single_cost[node] + COST_EPS)]
                victims.add(int(cheapest[0]))
            else:
                victims.update(int(x) for x in on_slots)
        trimmed = give_back(view, sorted(victims, key=lambda s: (-float(cost[s]), -int(rank[s]))))
        if bound is not None and len(trimmed) > bound:
            continue
        total = float(cost[trimmed].sum())
        if _better(total, trimmed, best, start, rank):
            best.victims, best.cost = trimmed, total
    return best


