"""Minimal covers of one node for a request of several nodes (``select_multi``): the sets of a
node's candidates that free what the request lacks there, none of which can be left out, listed
depth first, cheapest candidates first, within a step budget per node."""

from __future__ import annotations

import math
from dataclasses import dataclass

from .cluster import FArr

COVER_STEPS = 4_000  # subsets tried per node while listing its covers


@dataclass(slots=True)
class Cover:
    slots: frozenset[int]
    cost: float


def minimal_covers(slots: list[int], amounts: list[list[float]], deficit: list[float], cost: FArr,
            bound: int | None, keep: int, by_size: bool) -> list[Cover]:
    """Minimal covers of one node: sets of its candidates that free enough, none of which can
    be left out, of at most ``bound`` members; the ``keep`` cheapest (or smallest)."""
    costs = [float(cost[s]) for s in slots]
    order = sorted(range(len(slots)), key=lambda i: (costs[i], slots[i]))
    if len(deficit) == 1:  # one resource asked for (GPUs, most often): the same search on plain floats
        found = _covers_of_one([a[0] for a in amounts], deficit[0], slots, costs, order, bound)
    else:
        found = _covers_of_several(amounts, deficit, slots, costs, order, bound)
    found.sort(key=(lambda c: (len(c.slots), c.cost)) if by_size else (lambda c: (c.cost, len(c.slots))))
    return found[:keep]


def _covers_of_one(amount: list[float], deficit: float, slots: list[int], costs: list[float], order: list[int],
                   bound: int | None) -> list[Cover]:
    """``_covers_of_several`` for one resource: the same sets, found in the same order."""
    n = len(order)
    suffix = [0.0] * (n + 1)
    for p in range(n - 1, -1, -1):
        suffix[p] = suffix[p + 1] + amount[order[p]]
    most = math.inf if bound is None else bound
    found: list[Cover] = []
    steps = 0

    def dfs(p: int, chosen: list[int], left: float) -> None:
        nonlocal steps
        steps += 1
        if left <= 0:
            if all(left + amount[i] > 0 for i in chosen):
                found.append(Cover(frozenset(slots[i] for i in chosen), sum(costs[i] for i in chosen)))
            return
        if p == n or steps > COVER_STEPS or len(chosen) >= most or left > suffix[p]:
            return
        i = order[p]
        chosen.append(i)
        dfs(p + 1, chosen, left - amount[i])
        chosen.pop()
        dfs(p + 1, chosen, left)

    dfs(0, [], deficit - 0)
    return found


def _covers_of_several(amounts: list[list[float]], deficit: list[float], slots: list[int], costs: list[float],
                       order: list[int], bound: int | None) -> list[Cover]:
    """Depth first over the candidates, cheapest first: take it or leave it, cut where the rest
    cannot free enough, a set kept once it frees enough and each member is needed."""
    n, m = len(order), len(deficit)
    suffix = [[0.0] * m for _ in range(n + 1)]
    for p in range(n - 1, -1, -1):
        suffix[p] = [suffix[p + 1][j] + amounts[order[p]][j] for j in range(m)]
    found: list[Cover] = []
    steps = 0

    def short(chosen: list[int]) -> list[float]:
        return [deficit[j] - sum(amounts[i][j] for i in chosen) for j in range(m)]

    def dfs(p: int, chosen: list[int], left: list[float]) -> None:
        nonlocal steps
        steps += 1
        if all(x <= 0 for x in left):
            if all(any(x + amounts[i][j] > 0 for j, x in enumerate(left)) for i in chosen):
                found.append(Cover(frozenset(slots[i] for i in chosen), sum(costs[i] for i in chosen)))
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
    return found
