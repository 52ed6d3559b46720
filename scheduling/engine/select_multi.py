"""class_cost, requests for several nodes: the cheapest union of per-node covers.

A node qualifies once its victims free the request's amounts there. Any feasible set
contains, on each of the nodes it makes qualify, a *minimal cover* of that node (a set of
the node's candidates that frees enough, none of which can be left out), and the union
of those covers is feasible, costs no more and has no more victims. Costs are never
negative, so the best set is always such a union: the search chooses ``want`` nodes of
one group and a minimal cover on each.

- Exact (up to EXACT_LIMIT eligible candidates): every potential node, every minimal
  cover within the bound, branch and bound over nodes. The lower bound of what is still to
  pay charges each candidate's cost shared among the nodes it may help (a gang counted on
  two nodes is paid once), so it never exceeds the truth and nothing better is cut.
- Large: the best-bounded nodes of each group, their cheapest covers, a greedy that adds
  the node whose cover adds least, then single swaps while they lower the cost.
- Before any of these, a group is passed over when it cannot be done within the bound:
  ``select_bounds.victims_needed`` counts the fewest victims any set needs there.
- Fallback, so a request never waits while a set within the bound exists that the above
  missed: the fewest victims first (covers by size), on every potential node of the group.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from .cluster import EPS, BArr, FArr, IArr
from .covers import Cover, minimal_covers
from .placement import RequestView, give_back
from .select import COST_EPS, EXACT_LIMIT, _Best, _better
from .select_bounds import victims_needed

COVERS_EXACT = 64  # minimal covers kept per node in the exact search (the cheapest)
COVERS_LARGE = 8  # ... and in the large one
NODE_SLACK = 16  # large: nodes searched per group beyond the ones needed
BNB_STEPS = 200_000  # branch and bound steps before it keeps the best found
SWAP_EVALS = 20_000  # large: swaps tried
FALLBACK_NODES = 4_096  # large: the fallback's nodes per group (the best-bounded)


@dataclass(slots=True)
class _Node:
    node: int
    covers: list[Cover]


@dataclass(slots=True)
class _Ctx:
    """One group's search: its nodes (cheapest cover first), how many must qualify, the bound,
    each candidate's cost as a plain float, and where the best set found so far is kept."""
    nodes: list[_Node]
    want: int
    bound: int | None
    price: dict[int, float]
    start: FArr
    rank: IArr
    best: _Best
    shared: bool  # some candidate is in covers of two nodes (a gang)

    def extra(self, cover: Cover, union: frozenset[int]) -> float:
        return sum(self.price[s] for s in cover.slots - union) if union else cover.cost

    def total(self, union: Iterable[int]) -> float:
        return sum(self.price[s] for s in union)

    def offer(self, union: Iterable[int]) -> None:
        victims = sorted(union)
        total = self.total(victims)
        if _better(total, victims, self.best, self.start, self.rank):
            self.best.victims, self.best.cost = victims, total


def multi_node_best(view: RequestView, ents: IArr, potential: BArr, cost: FArr, start: FArr, rank: IArr,
                    bound: int | None, eligible: int) -> _Best:
    """The best set for a request of several nodes (see the module's words)."""
    exact = eligible <= EXACT_LIMIT
    best = _Best()
    score: FArr | None = None
    for g in view.groups.tolist():
        want = view.k - int(view.base_count[g]) - int(view.lendable_cap[g])
        cand = np.flatnonzero(potential & (view.group == g))
        if want <= 0 or len(cand) < want or victims_needed(view, ents, cand, want) > (
                math.inf if bound is None else bound):
            continue
        if not exact:
            score = _node_scores(view, ents, potential, cost) if score is None else score
            cand = _best_bounded(score, cand, want + NODE_SLACK)
        ctx = _ctx(_nodes(view, ents, cand, cost, bound, COVERS_EXACT if exact else COVERS_LARGE),
                   want, bound, cost, start, rank)
        _greedy(ctx)
        if exact:
            _branch_and_bound(ctx)
        elif ctx.shared or bound is not None:  # else the greedy's nodes are each at their cheapest
            _swaps(ctx)
        if ctx.best.victims is None:
            every = np.flatnonzero(potential & (view.group == g))
            if score is not None:
                every = _best_bounded(score, every, FALLBACK_NODES)
            fallback = _ctx(_nodes(view, ents, every, cost, bound, COVERS_LARGE, by_size=True),
                            want, bound, cost, start, rank)
            _fewest(fallback)
            ctx = fallback
        found = ctx.best.victims
        if found is None:
            continue
        if any(len(view.cluster.a_entries[s]) > 1 for s in found):
            # A gang may make another node qualify and a victim there needless: give back.
            found = give_back(view, sorted(found, key=lambda s: (-ctx.price[s], -int(rank[s]))))
        total = ctx.total(found)
        if _better(total, found, best, start, rank):
            best.victims, best.cost = found, total
    return best


def _ctx(nodes: list[_Node], want: int, bound: int | None, cost: FArr, start: FArr, rank: IArr) -> _Ctx:
    seen: set[int] = set()
    shared = False
    for nd in nodes:
        mine = {s for cover in nd.covers for s in cover.slots}
        shared = shared or not seen.isdisjoint(mine)
        seen |= mine
    price = dict(zip(sorted(seen), cost[sorted(seen)].tolist(), strict=True))
    return _Ctx(nodes, want, bound, price, start, rank, _Best(), shared)


def _node_scores(view: RequestView, ents: IArr, potential: BArr, cost: FArr) -> FArr:
    """Per node, what its candidates' cheapest set could cost: the cheapest candidate that frees
    enough alone, else all of them (infinite off the potential nodes). Vectorised: every node."""
    cluster = view.cluster
    n = len(cluster.node_names)
    nodes = cluster.e_node[ents]
    c = cost[cluster.e_alloc[ents]]
    score = np.bincount(nodes, weights=c, minlength=n)
    if not view.exclusive:
        alone = np.ones(len(ents), dtype=bool)
        for r in view.need_idx.tolist():
            alone &= view.free[nodes, r] + cluster.e_res[ents, r] + EPS >= view.need[r]
        single = np.full(n, np.inf)
        np.minimum.at(single, nodes[alone], c[alone])
        score = np.minimum(score, single)
    result: FArr = np.where(potential, score, np.inf)
    return result


def _best_bounded(score: FArr, cand: IArr, keep: int) -> IArr:
    """The ``keep`` nodes of ``cand`` with the lowest scores (ties: lower index), in index order."""
    if len(cand) <= keep:
        return cand
    order = np.lexsort((cand, score[cand]))[:keep]
    result: IArr = cand[np.sort(order)]
    return result


def _nodes(view: RequestView, ents: IArr, cand: IArr, cost: FArr, bound: int | None, keep: int,
           by_size: bool = False) -> list[_Node]:
    """The nodes ``cand`` (ascending) with their covers, cheapest cover first."""
    cluster = view.cluster
    on = np.zeros(len(cluster.node_names), dtype=bool)
    on[cand] = True
    mine = ents[on[cluster.e_node[ents]]]
    mine = mine[np.argsort(cluster.e_node[mine], kind="stable")]
    lo = np.searchsorted(cluster.e_node[mine], cand).tolist()
    hi = np.searchsorted(cluster.e_node[mine], cand, side="right").tolist()
    out = []
    for node, a, b in zip(cand.tolist(), lo, hi, strict=True):
        here = mine[a:b]
        slots = [int(s) for s in cluster.e_alloc[here]]
        if view.exclusive:
            covers = [Cover(frozenset(slots), float(cost[slots].sum()))] if (
                len(here) == int(cluster.count[node]) and (bound is None or len(slots) <= bound)) else []
        else:
            amounts: list[list[float]] = cluster.e_res[here][:, view.need_idx].tolist()
            deficit = [float(view.need[r] - view.free[node, r]) - EPS for r in view.need_idx.tolist()]
            covers = minimal_covers(slots, amounts, deficit, cost, bound, keep, by_size)
        if covers:
            out.append(_Node(node, covers))
    out.sort(key=lambda n: (n.covers[0].cost, len(n.covers[0].slots), n.node))
    return out


def _helps(ctx: _Ctx) -> dict[int, list[int]]:
    """For each candidate, the nodes (indices into ctx.nodes) with a cover holding it."""
    out: dict[int, list[int]] = {}
    for i, nd in enumerate(ctx.nodes):
        for s in {s for cover in nd.covers for s in cover.slots}:
            out.setdefault(s, []).append(i)
    return out


def _greedy(ctx: _Ctx) -> None:
    """Add, ``want`` times, the node and cover that add the least cost (then fewest victims).
    A node's best option changes only when a chosen cover shares a candidate with it."""
    helps = _helps(ctx)
    union: frozenset[int] = frozenset()
    options: dict[int, tuple[float, int, int, Cover] | None] = {}

    def option(i: int) -> tuple[float, int, int, Cover] | None:
        choice: tuple[float, int, int, Cover] | None = None
        for cover in ctx.nodes[i].covers:
            grown = len(union | cover.slots) if union else len(cover.slots)
            if ctx.bound is not None and grown > ctx.bound:
                continue
            key = (ctx.extra(cover, union), grown, i)
            if choice is None or key < choice[:3]:
                choice = (*key, cover)
        return choice

    for i in range(len(ctx.nodes)):
        options[i] = option(i)
    for _ in range(ctx.want):
        live = [o for o in options.values() if o is not None]
        if not live:
            return
        pick = min(live, key=lambda o: o[:3])
        del options[pick[2]]
        added = pick[3].slots - union
        union = union | pick[3].slots
        stale = {j for s in added for j in helps[s]}
        if ctx.bound is not None:
            stale = set(options)  # the bound left is smaller for every node
        for j in stale & set(options):
            options[j] = option(j)
    ctx.offer(union)


def _branch_and_bound(ctx: _Ctx) -> None:
    nodes, want, bound = ctx.nodes, ctx.want, ctx.bound
    share = {s: ctx.price[s] / len(at) for s, at in _helps(ctx).items()}
    best = ctx.best
    steps = 0

    def still_to_pay(i: int, need: int, union: frozenset[int]) -> float:
        lows = sorted(min(sum(share[s] for s in c.slots - union) for c in nd.covers) for nd in nodes[i:])
        return sum(lows[:need])

    def dfs(i: int, picked: int, union: frozenset[int], total: float) -> None:
        nonlocal steps
        steps += 1
        if picked == want:
            ctx.offer(union)
            return
        need = want - picked
        if len(nodes) - i < need or steps > BNB_STEPS:
            return
        if best.victims is not None and total + still_to_pay(i, need, union) > best.cost + COST_EPS:
            return
        options = sorted(nodes[i].covers, key=lambda c: (ctx.extra(c, union), len(c.slots)))
        for cover in options:
            grown = union | cover.slots
            if bound is None or len(grown) <= bound:
                dfs(i + 1, picked + 1, grown, total + ctx.extra(cover, union))
        dfs(i + 1, picked, union, total)

    dfs(0, 0, frozenset(), 0.0)


def _swaps(ctx: _Ctx) -> None:
    """Large instances: from the greedy's set, replace one chosen node's cover by another
    node's (or another cover of its own) while that lowers the cost."""
    best = ctx.best
    if best.victims is None:
        return
    chosen = _assign(ctx.nodes, set(best.victims))
    evals = 0
    improved = True
    while improved and evals < SWAP_EVALS:
        improved = False
        for out_i in list(chosen):
            rest = frozenset().union(*(c.slots for i, c in chosen.items() if i != out_i))
            rest_cost = ctx.total(rest)
            for in_i, nd in enumerate(ctx.nodes):
                if in_i in chosen and in_i != out_i:
                    continue
                for cover in nd.covers:
                    evals += 1
                    if ctx.bound is not None and len(rest | cover.slots) > ctx.bound:
                        continue
                    if rest_cost + ctx.extra(cover, rest) < best.cost - COST_EPS:
                        del chosen[out_i]
                        chosen[in_i] = cover
                        ctx.offer(rest | cover.slots)
                        improved = True
                        break
                if improved or evals >= SWAP_EVALS:
                    break
            if improved or evals >= SWAP_EVALS:
                break


def _assign(nodes: list[_Node], union: set[int]) -> dict[int, Cover]:
    """Which node each cover inside ``union`` came from (the greedy's choice, recovered)."""
    out: dict[int, Cover] = {}
    for i, nd in enumerate(nodes):
        for cover in nd.covers:
            if cover.slots <= union:
                out[i] = cover
                break
    return out


def _fewest(ctx: _Ctx) -> None:
    """The fallback: over every potential node's smallest covers, add the cover that makes nodes
    qualify for the fewest new victims each (a gang freeing three nodes counts a third per node),
    then the cheapest; every node it makes qualify counts as chosen."""
    helps = _helps(ctx)
    union: frozenset[int] = frozenset()
    done: set[int] = set()
    while len(done) < ctx.want:
        choice: tuple[float, float, int, frozenset[int], set[int]] | None = None
        for i, nd in enumerate(ctx.nodes):
            if i in done:
                continue
            for cover in nd.covers:
                grown = union | cover.slots
                if ctx.bound is not None and len(grown) > ctx.bound:
                    continue
                near = {j for s in cover.slots for j in helps[s]} - done
                gained = {j for j in near if any(c.slots <= grown for c in ctx.nodes[j].covers)}
                key = ((len(grown) - len(union)) / len(gained), ctx.extra(cover, union), i)
                if choice is None or key < choice[:3]:
                    choice = (*key, grown, gained)
        if choice is None:
            return
        union = choice[3]
        done |= choice[4]
    ctx.offer(union)
