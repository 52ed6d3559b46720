"""class_cost, requests for several nodes: the cheapest union of per-node covers.

A node qualifies once its victims free the request's amounts there. Any feasible set
contains, on each of the nodes it makes qualify, a *minimal cover* of that node (a set of
the node's candidates that frees enough, none of which can be left out), and the union
of those covers is feasible, costs no more and has no more victims. Costs are never
negative, so the best set is always such a union: the search chooses ``want`` nodes of
one group and a minimal cover on each.

- Exact (up to MULTI_EXACT_LIMIT eligible candidates): every potential node, every minimal
  cover within the bound, branch and bound over nodes. The lower bound of what is still to
  pay charges each candidate's cost shared among the nodes it may help (a gang counted on
  two nodes is paid once), so it never exceeds the truth and nothing better is cut.
- Large: the best-bounded nodes of each group, their cheapest covers, a greedy that adds
  the node whose cover adds least, then single swaps while they lower the cost.
- Fallback, so a request never waits while a set within the bound exists that the above
  missed: the fewest victims first (covers by size), on every potential node of the group.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from .cluster import EPS, BArr, FArr, IArr
from .placement import RequestView, give_back
from .select import COST_EPS, _Best, _better
from .select_bounds import node_entries

MULTI_EXACT_LIMIT = 30
COVERS_EXACT = 64  # minimal covers kept per node in the exact search (the cheapest)
COVERS_LARGE = 8  # ... and in the large one
COVER_STEPS = 4_000  # subsets tried per node while listing its covers
NODE_SLACK = 16  # large: nodes searched per group beyond the ones needed
BNB_STEPS = 200_000  # branch and bound steps before it keeps the best found
SWAP_EVALS = 20_000  # large: swaps tried


@dataclass(slots=True)
class _Cover:
    slots: frozenset[int]
    cost: float


@dataclass(slots=True)
class _Node:
    node: int
    covers: list[_Cover]


def multi_node_best(view: RequestView, ents: IArr, potential: BArr, cost: FArr, start: FArr, rank: IArr,
                    bound: int | None, eligible: int) -> _Best:
    """The best set for a request of several nodes (see the module's words)."""
    exact = eligible <= MULTI_EXACT_LIMIT
    best = _Best()
    in_pool = np.zeros(len(view.cluster.e_alloc), dtype=bool)
    in_pool[ents] = True
    for g in view.groups.tolist():
        want = view.k - int(view.base_count[g]) - int(view.lendable_cap[g])
        cand = np.flatnonzero(potential & (view.group == g))
        if want <= 0 or len(cand) < want:
            continue
        if not exact:
            cand = _best_bounded(view, in_pool, cand, cost, want + NODE_SLACK)
        nodes = _nodes(view, in_pool, cand, cost, bound, COVERS_EXACT if exact else COVERS_LARGE)
        found = _Best()
        _greedy(nodes, want, bound, cost, start, rank, found)
        if exact:
            _branch_and_bound(nodes, want, bound, cost, start, rank, found)
        else:
            _swaps(nodes, want, bound, cost, start, rank, found)
        if found.victims is None:
            every = np.flatnonzero(potential & (view.group == g))
            _fewest(_nodes(view, in_pool, every, cost, bound, COVERS_LARGE, by_size=True), want, bound,
                    cost, start, rank, found)
        if found.victims is None:
            continue
        kept = give_back(view, sorted(found.victims, key=lambda s: (-float(cost[s]), -int(rank[s]))))
        total = float(cost[kept].sum()) if kept else 0.0
        if _better(total, kept, best, start, rank):
            best.victims, best.cost = kept, total
    return best


def _best_bounded(view: RequestView, in_pool: BArr, cand: IArr, cost: FArr, keep: int) -> IArr:
    """The ``keep`` nodes whose candidates' cheapest set could cost least (a node that one
    candidate frees is bounded by that candidate; any other by the cost of all of them)."""
    if len(cand) <= keep:
        return cand
    cluster = view.cluster
    grouped, starts = node_entries(cluster)
    score = np.empty(len(cand))
    for i, node in enumerate(cand.tolist()):
        here = grouped[starts[node]:starts[node + 1]]
        here = here[in_pool[here]]
        c = cost[cluster.e_alloc[here]]
        alone = np.all(view.free[node, view.need_idx] + cluster.e_res[here][:, view.need_idx] + EPS
                       >= view.need[view.need_idx], axis=1) if not view.exclusive else np.zeros(len(here), bool)
        score[i] = float(c[alone].min()) if alone.any() else float(c.sum())
    order = np.lexsort((cand, score))[:keep]
    result: IArr = cand[np.sort(order)]
    return result


def _nodes(view: RequestView, in_pool: BArr, cand: IArr, cost: FArr, bound: int | None, keep: int,
           by_size: bool = False) -> list[_Node]:
    cluster = view.cluster
    grouped, starts = node_entries(cluster)
    out = []
    for node in cand.tolist():
        here = grouped[starts[node]:starts[node + 1]]
        here = here[in_pool[here]]
        slots = [int(s) for s in cluster.e_alloc[here]]
        if view.exclusive:
            covers = [_Cover(frozenset(slots), float(cost[slots].sum()))] if (
                len(here) == int(cluster.count[node]) and (bound is None or len(slots) <= bound)) else []
        else:
            amounts = [[float(x) for x in row] for row in cluster.e_res[here][:, view.need_idx]]
            deficit = [float(view.need[r] - view.free[node, r]) - EPS for r in view.need_idx.tolist()]
            covers = _covers(slots, amounts, deficit, cost, bound, keep, by_size)
        if covers:
            out.append(_Node(node, covers))
    out.sort(key=lambda n: (n.covers[0].cost, len(n.covers[0].slots), n.node))
    return out


def _covers(slots: list[int], amounts: list[list[float]], deficit: list[float], cost: FArr,
            bound: int | None, keep: int, by_size: bool) -> list[_Cover]:
    """Minimal covers of one node: sets of its candidates that free enough, none of which can
    be left out, of at most ``bound`` members; the ``keep`` cheapest (or smallest)."""
    costs = [float(cost[s]) for s in slots]
    order = sorted(range(len(slots)), key=lambda i: (costs[i], slots[i]))
    n, m = len(order), len(deficit)
    suffix = [[0.0] * m for _ in range(n + 1)]
    for p in range(n - 1, -1, -1):
        suffix[p] = [suffix[p + 1][j] + amounts[order[p]][j] for j in range(m)]
    found: list[_Cover] = []
    steps = 0

    def short(chosen: list[int]) -> list[float]:
        return [deficit[j] - sum(amounts[i][j] for i in chosen) for j in range(m)]

    def dfs(p: int, chosen: list[int], left: list[float]) -> None:
        nonlocal steps
        steps += 1
        if all(x <= 0 for x in left):
            if all(any(x + amounts[i][j] > 0 for j, x in enumerate(left)) for i in chosen):
                found.append(_Cover(frozenset(slots[i] for i in chosen), sum(costs[i] for i in chosen)))
            return
        if p == n or steps > COVER_STEPS or (bound is not None and len(chosen) >= bound):
            return
        if any(left[j] > suffix[p][j] for j in range(m)):
            return
        i = order[p]
        chosen.append(i)
        dfs(p + 1, chosen, [left[j] - amounts[i][j] for j in range(m)])
        chosen.pop()
        dfs(p + 1, chosen, left)

    dfs(0, [], short([]))
    found.sort(key=(lambda c: (len(c.slots), c.cost)) if by_size else (lambda c: (c.cost, len(c.slots))))
    return found[:keep]


def _offer(union: Iterable[int], total: float, best: _Best, start: FArr, rank: IArr) -> None:
    victims = sorted(union)
    if _better(total, victims, best, start, rank):
        best.victims, best.cost = victims, total


def _extra(cover: _Cover, union: frozenset[int], cost: FArr) -> float:
    return sum(float(cost[s]) for s in cover.slots - union)


def _greedy(nodes: list[_Node], want: int, bound: int | None, cost: FArr, start: FArr, rank: IArr,
            best: _Best) -> None:
    """Add, ``want`` times, the node and cover that add the least cost (then fewest victims)."""
    union: frozenset[int] = frozenset()
    picked: set[int] = set()
    for _ in range(want):
        choice: tuple[float, int, int, _Cover] | None = None
        for i, nd in enumerate(nodes):
            if i in picked:
                continue
            for cover in nd.covers:
                grown = union | cover.slots
                if bound is not None and len(grown) > bound:
                    continue
                key = (_extra(cover, union, cost), len(grown), i)
                if choice is None or key < choice[:3]:
                    choice = (*key, cover)
        if choice is None:
            return
        picked.add(choice[2])
        union = union | choice[3].slots
    _offer(union, float(cost[sorted(union)].sum()), best, start, rank)


def _branch_and_bound(nodes: list[_Node], want: int, bound: int | None, cost: FArr, start: FArr, rank: IArr,
                      best: _Best) -> None:
    helps: dict[int, int] = {}
    for nd in nodes:
        for s in {s for cover in nd.covers for s in cover.slots}:
            helps[s] = helps.get(s, 0) + 1
    share = {s: float(cost[s]) / count for s, count in helps.items()}
    steps = 0

    def still_to_pay(i: int, need: int, union: frozenset[int]) -> float:
        lows = sorted(min(sum(share[s] for s in c.slots - union) for c in nd.covers) for nd in nodes[i:])
        return sum(lows[:need])

    def dfs(i: int, picked: int, union: frozenset[int], total: float) -> None:
        nonlocal steps
        steps += 1
        if picked == want:
            _offer(union, total, best, start, rank)
            return
        need = want - picked
        if len(nodes) - i < need or steps > BNB_STEPS:
            return
        if best.victims is not None and total + still_to_pay(i, need, union) > best.cost + COST_EPS:
            return
        options = sorted(nodes[i].covers, key=lambda c: (_extra(c, union, cost), len(c.slots)))
        for cover in options:
            grown = union | cover.slots
            if bound is None or len(grown) <= bound:
                dfs(i + 1, picked + 1, grown, total + _extra(cover, union, cost))
        dfs(i + 1, picked, union, total)

    dfs(0, 0, frozenset(), 0.0)


def _swaps(nodes: list[_Node], want: int, bound: int | None, cost: FArr, start: FArr, rank: IArr,
           best: _Best) -> None:
    """Large instances: from the greedy's set, replace one chosen node's cover by another
    node's (or another cover of its own) while that lowers the cost."""
    if best.victims is None:
        return
    chosen = _assign(nodes, set(best.victims))
    evals = 0
    improved = True
    while improved and evals < SWAP_EVALS:
        improved = False
        for out_i in list(chosen):
            rest = frozenset().union(*(c.slots for i, c in chosen.items() if i != out_i))
            for in_i, nd in enumerate(nodes):
                if in_i in chosen and in_i != out_i:
                    continue
                for cover in nd.covers:
                    evals += 1
                    grown = rest | cover.slots
                    if bound is not None and len(grown) > bound:
                        continue
                    total = float(cost[sorted(grown)].sum())
                    if total < best.cost - COST_EPS:
                        del chosen[out_i]
                        chosen[in_i] = cover
                        best.victims, best.cost = sorted(grown), total
                        improved = True
                        break
                if improved or evals >= SWAP_EVALS:
                    break
            if improved or evals >= SWAP_EVALS:
                break


def _assign(nodes: list[_Node], union: set[int]) -> dict[int, _Cover]:
    """Which node each cover inside ``union`` came from (the greedy's choice, recovered)."""
    out: dict[int, _Cover] = {}
    for i, nd in enumerate(nodes):
        for cover in nd.covers:
            if cover.slots <= union:
                out[i] = cover
                break
    return out


def _fewest(nodes: list[_Node], want: int, bound: int | None, cost: FArr, start: FArr, rank: IArr,
            best: _Best) -> None:
    """The fallback: the greedy again, over every potential node's smallest covers, adding the
    node whose cover adds the fewest victims."""
    union: frozenset[int] = frozenset()
    picked: set[int] = set()
    for _ in range(want):
        choice: tuple[int, float, int, _Cover] | None = None
        for i, nd in enumerate(nodes):
            if i in picked:
                continue
            for cover in nd.covers:
                grown = union | cover.slots
                if bound is not None and len(grown) > bound:
                    continue
                key = (len(grown), _extra(cover, union, cost), i)
                if choice is None or key < choice[:3]:
                    choice = (*key, cover)
        if choice is None:
            return
        picked.add(choice[2])
        union = union | choice[3].slots
    _offer(union, float(cost[sorted(union)].sum()), best, start, rank)
