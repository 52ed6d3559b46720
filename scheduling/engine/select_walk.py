"""queue, rank, fair_share: the literal ordered greedy walk, on a growing prefix of a cached order."""

from __future__ import annotations

from collections.abc import Callable
from itertools import combinations

import numpy as np

from .cluster import EPS, BArr, Cluster, FArr, IArr
from .placement import RequestView, give_back
from .select import (
    PREFIX_START,
    Selection,
    pool_entries,
)


def ordered_greedy(view: RequestView, pool: BArr, walk: tuple[IArr, IArr], bound: int | None,
                   takes: Callable[[IArr], BArr] | None = None) -> Selection:
    """Walk ``pool`` in walk order taking each candidate until the request fits, then give
    back from the last to the first every victim not needed. ``walk`` is (position per
    slot, slots in order), cached per snapshot. ``takes`` decides, for the ordered pool, which
    candidates the walk takes (rank)."""
    cluster = view.cluster
    pos, order = walk
    in_pool = int(np.count_nonzero(pool))
    # The walk stops where the request first fits, and whether a candidate is taken depends
    # only on those before it: walk a growing prefix until it fits (or the pool is exhausted).
    # Only as much of the walk order is read as that prefix needs, not every slot.
    size = PREFIX_START
    while True:
        prefix = _pool_prefix(order, pool, size)
        took = takes(prefix) if takes is not None else np.ones(len(prefix), dtype=bool)
        taken_mask = np.zeros(cluster.slots, dtype=bool)
        taken_mask[prefix[took]] = True
        skipped_slots = prefix[~took]
        ents = pool_entries(view, taken_mask)
        # By node, then in walk order within a node (a slot has one entry per node at most).
        fit_pos = _fit_positions(view, ents[np.lexsort((pos[cluster.e_alloc[ents]], cluster.e_node[ents]))], pos)
        best_p: int | None = None
        for g in view.groups.tolist():
            want = view.k - int(view.base_count[g]) - int(view.lendable_cap[g])
            cand = fit_pos[(view.group == g) & (fit_pos >= 0)]
            if want <= 0 or len(cand) < want:
                continue
            p = int(np.partition(cand, want - 1)[want - 1])
            if best_p is None or p < best_p:
                best_p = p
        if best_p is not None or size >= in_pool:
            break
        size *= 4
    if best_p is None:
        return Selection(None, "NO_FEASIBLE_SET", set(skipped_slots.tolist()))
    reached = set(skipped_slots[pos[skipped_slots] < best_p].tolist())
    relevant_nodes = (fit_pos >= 0) & (fit_pos <= best_p)
    e_slots = cluster.e_alloc[ents]
    near = relevant_nodes[cluster.e_node[ents]] & (pos[e_slots] <= best_p)
    relevant = np.unique(e_slots[near])
    walk_back = relevant[np.argsort(-pos[relevant], kind="stable")].tolist()
    kept = give_back(view, walk_back)
    if bound is not None and len(kept) > bound:
        return Selection(None, "EXCEEDS_MAX_VICTIMS", reached)
    return Selection(kept, None, reached)


def _pool_prefix(order: IArr, pool: BArr, size: int) -> IArr:
    """The first ``size`` slots of ``order`` in ``pool`` (all of them if fewer), reading ``order``
    in growing chunks: a walk that fits early never looks at the rest."""
    found: list[IArr] = []
    count, start, chunk = 0, 0, max(4 * size, 4096)
    while count < size and start < len(order):
        part = order[start:start + chunk]
        found.append(part[pool[part]])
        count += len(found[-1])
        start += chunk
        chunk *= 2
    result: IArr = np.concatenate(found)[:size] if found else order[:0]
    return result


FEWEST_TRIES = 20_000  # sets tried by fewest_victims before it keeps the walk's answer


def fewest_victims(view: RequestView, pool: BArr, walk: tuple[IArr, IArr], bound: int | None,
                   walked: Selection) -> Selection:
    """queue with ``preempt_for: optimal_mini_job``: the fewest victims that make the request fit.
    Sets are tried by size, each size in walk order (so a tie goes to the set whose victims come
    first in the walk), up to one fewer than the walk needed (or the bound). Past FEWEST_TRIES sets
    the walk's answer stands: it is feasible and minimal, only perhaps not the fewest."""
    if walked.victims is None and walked.code != "EXCEEDS_MAX_VICTIMS":
        return walked
    _, order = walk
    items = [int(s) for s in order[pool[order]].tolist()]
    ceiling = len(walked.victims) - 1 if walked.victims is not None else len(items)
    if bound is not None:
        ceiling = min(ceiling, bound)
    tries = 0
    for size in range(1, ceiling + 1):
        for combo in combinations(items, size):
            tries += 1
            if tries > FEWEST_TRIES:
                return walked
            if view.feasible(combo):
                return Selection(sorted(combo), None, walked.skipped)
    return walked


def _fit_positions(view: RequestView, ents: IArr, pos: IArr) -> IArr:
    """Per node: the walk position at which taking candidates in order makes it fit (-1: never).
    ``ents`` are grouped by node and in walk order within a node."""
    cluster = view.cluster
    n = len(cluster.node_names)
    out = np.full(n, -1, dtype=np.int64)
    if not len(ents):
        return out
    nodes = cluster.e_node[ents]
    epos = pos[cluster.e_alloc[ents]]
    first = np.r_[True, nodes[1:] != nodes[:-1]]
    idx = view.need_idx
    fits = np.ones(len(ents), dtype=bool)
    seg_id = np.cumsum(first) - 1
    starts = np.flatnonzero(first)
    for r in idx.tolist():
        cum = np.cumsum(cluster.e_res[ents, r])
        base = np.r_[0.0, cum][starts][seg_id]
        fits &= view.free[nodes, r] + (cum - base) + EPS >= view.need[r]
    if view.exclusive:
        k = np.arange(len(ents)) - starts[seg_id] + 1
        fits &= k == cluster.count[nodes]
    hit = np.flatnonzero(fits)
    if not len(hit):
        return out
    first_hit = hit[np.r_[True, nodes[hit][1:] != nodes[hit][:-1]]]
    out[nodes[first_hit]] = epos[first_hit]
    return out


def rank_takes(cluster: Cluster, reclaim_any: BArr) -> Callable[[IArr], BArr]:
    """Rank's walk: a victim is skipped when its tenant would fall below its fair share
    once it and the tenant's victims taken before it are gone."""
    mask = cluster.total > 0

    def takes(ordered: IArr) -> BArr:
        out = np.ones(len(ordered), dtype=bool)
        tenants = cluster.a_tenant[ordered]
        exempt = reclaim_any[ordered]
        for t in np.unique(tenants[~exempt]).tolist():
            idx = np.flatnonzero((tenants == t) & ~exempt)
            items = cluster.a_held[ordered[idx]][:, mask]
            fair = float(cluster.t_fair[t])
            if not mask.any():
                out[idx] = fair - EPS <= 0.0
                continue
            slack = cluster.t_used[t][mask] - (fair - EPS) * cluster.total[mask]
            out[idx] = _first_fit(items, slack)
        return out

    return takes


def _first_fit(items: FArr, slack: FArr) -> BArr:
    """Sequential rule, vectorized: take an item when some resource keeps non-negative slack."""
    m = len(items)
    taken = np.zeros(m, dtype=bool)
    start = 0
    slack = slack.copy()
    tol = 1e-9
    while start < m:
        rest = items[start:]
        cidx = np.flatnonzero(np.any(rest <= slack + tol, axis=1)) + start
        if not len(cidx):
            break
        chunk = items[cidx]
        cum = np.cumsum(chunk, axis=0)
        before = cum - chunk
        ok = np.any(chunk <= slack - before + tol, axis=1)
        bad = np.flatnonzero(~ok)
        f = int(bad[0]) if len(bad) else len(cidx)
        taken[cidx[:f]] = True
        if f:
            slack = slack - cum[f - 1]
        if f == len(cidx):
            break
        start = int(cidx[f]) + 1
    return taken
