"""Choosing victims among eligible candidates (slots of the snapshot): what the strategies share.

- select_cost.py, class_cost: the cheapest feasible set (best set). Single-node
  requests search per node (victims elsewhere never help), with nodes ordered by
  a lower bound; several nodes: unions of per-node minimal covers
  (select_multi.py). Exact up to 30 eligible candidates; above that the
  contract allows a heuristic and only the best-bounded nodes are searched.
- select_priority.py, priority: per node, every candidate off, then the most
  important given back; nodes chosen by the node rule.
- select_walk.py, queue/rank/fair_share: the literal ordered greedy walk, on a
  growing prefix of a cached walk order, so no decision re-sorts all allocations.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from .cluster import EPS, BArr, Cluster, FArr, IArr
from .placement import RequestView

COST_EPS = 1e-6
EXACT_LIMIT = 30
# Above EXACT_LIMIT eligible candidates, single-node requests search this many best-bounded nodes.
HEURISTIC_NODES = 16
# Ordered walks first look at this many candidates, then four times more, until the request fits.
PREFIX_START = 1024
# Search steps before the exact search settles for what it has found.
STEP_BUDGET = 200_000


@dataclass(slots=True)
class Selection:
    victims: list[int] | None
    code: str | None = None  # failure code when victims is None
    skipped: set[int] = field(default_factory=set)  # rank: skipped by the never-below rule


def pool_entries(view: RequestView, pool: BArr) -> IArr:
    """Live entries of pool slots on placeable nodes that do not already fit, and that free some
    resource the request needs: any other victim is always given back and never in a cheapest
    set, so it cannot change a selection (an exclusive request, which needs every occupant gone,
    keeps them all)."""
    ents, slots = open_entries(view)
    result: IArr = ents[pool[slots]]
    return result


def open_entries(view: RequestView) -> tuple[IArr, IArr]:
    """The live entries any pool of this request shape draws from, and their slots (cached per
    shape until the snapshot changes: a decision then reads only these, not every entry)."""
    cluster = view.cluster

    def build() -> tuple[IArr, IArr]:
        live = cluster.live_entries()
        slots, nodes = cluster.live_slots_nodes()
        keep = (view.placeable & ~view.base_ok)[nodes]
        if not view.exclusive and len(view.need_idx):
            keep &= _frees_needed(view)
        return live[keep], slots[keep]

    result: tuple[IArr, IArr] = cluster.cached(("open_entries", view.shape_key), build)
    return result


def _frees_needed(view: RequestView) -> BArr:
    cluster = view.cluster
    key = ("frees", tuple(view.need_idx.tolist()))

    def build() -> BArr:
        live = cluster.live_entries()
        result: BArr = np.any(cluster.e_res[live][:, view.need_idx] > 0, axis=1)
        return result

    result: BArr = cluster.cached(key, build)
    return result


def _node_sums(view: RequestView, ents: IArr) -> FArr:
    cluster = view.cluster
    n = len(cluster.node_names)
    nodes = cluster.e_node[ents]
    freed = np.zeros((n, len(cluster.res_names)))
    for r in view.need_idx.tolist():
        freed[:, r] = np.bincount(nodes, weights=cluster.e_res[ents, r], minlength=n)
    return freed


def potential_nodes(view: RequestView, ents: IArr) -> tuple[BArr, FArr]:
    """Nodes where removing every pool entry would make the request fit."""
    cluster = view.cluster
    freed = _node_sums(view, ents)
    ok = view.placeable & ~view.base_ok
    idx = view.need_idx
    if len(idx):
        ok &= np.all(view.free[:, idx] + freed[:, idx] + EPS >= view.need[idx], axis=1)
    if view.exclusive:
        ok &= np.bincount(cluster.e_node[ents], minlength=len(cluster.node_names)) == cluster.count
    return ok, freed


def feasible_with_all(view: RequestView, potential: BArr) -> bool:
    counts = view.base_count + view.lendable_cap
    if len(counts) == 1:  # one group (no "same" label): every node is in it
        return bool(counts[0] + np.count_nonzero(potential) >= view.k)
    extra = np.bincount(view.group[potential], minlength=len(counts))
    return bool(np.any(counts + extra[: len(counts)] >= view.k))


def _better(cost: float, victims: Sequence[int], best: _Best, start: FArr, rank: IArr) -> bool:
    if best.victims is None:
        return True
    if cost < best.cost - COST_EPS:
        return True
    if cost > best.cost + COST_EPS:
        return False
    if len(victims) != len(best.victims):
        return len(victims) < len(best.victims)
    mine = float(start[list(victims)].min())
    theirs = float(start[best.victims].min())
    if abs(mine - theirs) > EPS:
        return mine > theirs
    ids = [int(x) for x in sorted(rank[list(victims)])]
    return ids < [int(x) for x in sorted(rank[best.victims])]


@dataclass(slots=True)
class _Best:
    victims: list[int] | None = None
    cost: float = 0.0
    steps: int = 0


def _search(items: list[int], cost: FArr, bound: int | None, best: _Best, start: FArr, rank: IArr,
            fits: Callable[[list[int]], bool]) -> None:
    """Branch and bound over subsets of ``items``, keeping the best feasible set."""
    n = len(items)
    costs = [float(cost[s]) for s in items]

    def dfs(i: int, chosen: list[int], total: float) -> None:
        best.steps += 1
        if chosen and fits(chosen):
            if _better(total, chosen, best, start, rank):
                best.victims, best.cost = list(chosen), total
            return
        if i == n or (bound is not None and len(chosen) >= bound) or best.steps > STEP_BUDGET:
            return
        if not fits(chosen + items[i:]):
            return
        t = total + costs[i]
        if best.victims is None or (t < best.cost + COST_EPS
                                    and not (t > best.cost - COST_EPS and len(chosen) + 1 > len(best.victims))):
            chosen.append(items[i])
            dfs(i + 1, chosen, t)
            chosen.pop()
        dfs(i + 1, chosen, total)

    dfs(0, [], 0.0)


def _by_cost(slots: Sequence[int], cost: FArr, start: FArr, rank: IArr) -> list[int]:
    return sorted(slots, key=lambda s: (float(cost[s]), -float(start[s]), int(rank[s])))


def _node_fit(view: RequestView, node: int, slots: Sequence[int] = ()) -> Callable[[list[int]], bool]:
    """Fit on one node, with each candidate's freed amounts precomputed (plain floats: hot loop)."""
    cluster = view.cluster
    idx = view.need_idx.tolist()
    deficit = [float(view.need[r] - view.free[node, r]) - EPS for r in idx]
    freed: dict[int, list[float]] = {}
    for s in slots:
        amounts = [0.0] * len(idx)
        for e in cluster.a_entries[s]:
            if cluster.e_node[e] == node:
                row = cluster.e_res[e]
                for j, r in enumerate(idx):
                    amounts[j] += float(row[r])
        freed[s] = amounts
    occupants = int(cluster.count[node])
    exclusive = view.exclusive

    def fits(victims: list[int]) -> bool:
        if exclusive and len(victims) != occupants:
            return view.qualifies(node, victims)
        for j, d in enumerate(deficit):
            total = 0.0
            for v in victims:
                total += freed[v][j] if v in freed else 0.0
            if total < d:
                return False
        return True

    return fits


def _entry_mask(cluster: Cluster, ents: IArr) -> BArr:
    mask = np.zeros(len(cluster.e_alloc), dtype=bool)
    mask[ents] = True
    return mask
