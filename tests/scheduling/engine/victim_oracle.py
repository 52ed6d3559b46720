"""Generated class_cost contests with up to 30 eligible candidates, and a brute-force oracle.

The oracle enumerates victim subsets directly against the contract's rules (docs/decisions.md,
class_cost): a set is valid when, once its allocations leave every node they hold, at least
``nodes`` ready nodes have the request's ``per_node`` free (and no occupant for an exclusive
request), and it has at most ``max_victims`` members. It shares no code with the engine's search.

``generate`` draws a document through ``pick`` (a function choosing one element of a sequence),
so a Hypothesis strategy and a seeded ``random.Random`` draw the same family of instances.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import combinations
from typing import Any

from . import oracle

Pick = Callable[[Sequence[Any]], Any]
NOW = "2026-05-01T12:00:00Z"
STARTS = ["2026-05-01T04:00:00Z", "2026-05-01T08:00:00Z", "2026-05-01T10:30:00Z", "2026-05-01T11:40:00Z",
          "2026-05-01T11:58:00Z"]
MAX_ELIGIBLE = 30


def generate(pick: Pick, min_eligible: int = 0, multi: bool = False) -> dict[str, Any]:
    """A packed cluster of 3 to 12 nodes, whole-node and partial-node work, gangs across nodes,
    and a pending request for 1 to 4 nodes of 1, 2, 4 or 8 GPUs. At most MAX_ELIGIBLE candidates
    are eligible (class below the request's); ``min_eligible`` asks for at least that many where
    the cluster has room for them (above 20: 6 to 15 nodes, so that there is room); ``multi``
    asks for 2 to 4 nodes."""
    n_nodes = pick(range(6, 16) if min_eligible > 20 else range(3, 13))
    nodes = [{"name": f"n{i}", "capacity": {"gpu": pick([8, 8, 8, 4]), "cpu": 64},
              "state": pick(["ready"] * 12 + ["down"])} for i in range(n_nodes)]
    free = {n["name"]: n["capacity"]["gpu"] for n in nodes}
    names = [n["name"] for n in nodes]
    request_class = pick([7, 8, 9])
    running: list[dict[str, Any]] = []
    eligible = 0
    target = max(min_eligible, pick(range(8, MAX_ELIGIBLE + 1)))
    for j in range(120):
        if not any(free.values()):
            break
        gang = pick([1, 1, 1, 1, 2, 2, 3]) if len(names) > 1 else 1
        open_nodes = [n for n in names if free[n] > 0]
        if len(open_nodes) < gang:
            gang = 1
        first = pick(open_nodes)
        span = [first] + [n for n in open_nodes if n != first][: gang - 1]
        gpu = min([pick([1, 1, 1, 2, 2, 4, 8])] + [free[n] for n in span])
        low = eligible < target and pick([True] * 7 + [False])
        klass = pick([0, 1, 2, 3, 4, 5, 6]) if low else pick([request_class, 9, 10])
        if klass < request_class:
            if eligible >= MAX_ELIGIBLE:
                klass = 10
            else:
                eligible += 1
        for n in span:
            free[n] -= gpu
        alloc: dict[str, Any] = {
            "id": f"a{j:03d}", "placement": {n: {"gpu": gpu, "cpu": 2} for n in span},
            "preemption_class": klass, "checkpoint": pick(["auto", "manual", "none", "none"]),
            "checkpoint_minutes": pick([1, 5, 5, 12, 30]), "started_at": pick(STARTS),
            "walltime_minutes": pick([None, None, None, 600, 2000]),
        }
        running.append(alloc)
    pending = {"id": "p", "nodes": pick([2, 2, 3, 4] if multi else [1, 1, 2, 2, 3, 4]), "per_node": {"gpu": pick([1, 2, 4, 8, 8])},
               "preemption_class": request_class, "exclusive": pick([False] * 9 + [True])}
    return {"now": NOW, "policy": {"kind": "class_cost", "max_victims": pick([2, 3, 3, 4, None])},
            "nodes": nodes, "running": running, "pending": pending}


def eligible(d: dict[str, Any]) -> list[dict[str, Any]]:
    return [a for a in d["running"] if oracle.class_cost_eligible(d, a)]


def is_valid(d: dict[str, Any], victims: set[str]) -> bool:
    """The request fits once ``victims`` leave, every victim is eligible, within the bound."""
    ok = {a["id"] for a in eligible(d)}
    bound = d["policy"].get("max_victims", 3)
    if not victims <= ok or (bound is not None and len(victims) > bound):
        return False
    return oracle.fits(d, victims)


class _Fitter:
    """Fit checks on plain dicts, precomputed once per document (the oracle tries many sets)."""

    def __init__(self, d: dict[str, Any]) -> None:
        req = d["pending"]
        self.k = req.get("nodes", 1)
        self.need = req.get("per_node", {})
        self.exclusive = req.get("exclusive", False)
        ready = {n["name"] for n in d["nodes"] if n.get("state", "ready") == "ready"}
        self.free = {n["name"]: dict(n["capacity"]) for n in d["nodes"] if n["name"] in ready}
        self.count = {name: 0 for name in self.free}
        self.holds: dict[str, dict[str, dict[str, float]]] = {}
        for a in d["running"]:
            self.holds[a["id"]] = {n: r for n, r in a["placement"].items() if n in self.free}
            for n, res in self.holds[a["id"]].items():
                self.count[n] += 1
                for r, amount in res.items():
                    self.free[n][r] = self.free[n].get(r, 0.0) - amount

    def fits(self, victims: Sequence[str]) -> bool:
        freed: dict[str, dict[str, float]] = {}
        gone: dict[str, int] = {}
        for v in victims:
            for n, res in self.holds[v].items():
                gone[n] = gone.get(n, 0) + 1
                into = freed.setdefault(n, {})
                for r, amount in res.items():
                    into[r] = into.get(r, 0.0) + amount
        good = 0
        for n, free in self.free.items():
            if self.exclusive and self.count[n] - gone.get(n, 0):
                continue
            more = freed.get(n, {})
            if all(free.get(r, 0.0) + more.get(r, 0.0) + 1e-9 >= a for r, a in self.need.items()):
                good += 1
        return good >= self.k


def best_set(d: dict[str, Any], limit: int | None = None) -> tuple[float, list[str]] | None:
    """The cheapest valid set (cost, sorted ids) by enumerating every subset of the eligible
    candidates of at most ``max_victims`` members (or ``limit``, for unbounded policies); None
    when no such subset is valid."""
    bound = d["policy"].get("max_victims", 3)
    size_cap = bound if bound is not None else limit
    cands = eligible(d)
    if size_cap is None:
        size_cap = len(cands)
    fitter = _Fitter(d)
    costs = {a["id"]: oracle.cost(d, a) for a in cands}
    best: tuple[float, list[str]] | None = None
    for size in range(1, size_cap + 1):
        for combo in combinations(sorted(costs), size):
            total = sum(costs[c] for c in combo)
            if best is not None and total >= best[0] - 1e-6:
                continue
            if fitter.fits(combo):
                best = (total, list(combo))
    return best


def valid_set_exists(d: dict[str, Any]) -> bool:
    """Is some subset valid? Unbounded: exactly when all eligible candidates together fit (more
    victims never hurt a fit); bounded: by enumeration."""
    if d["policy"].get("max_victims", 3) is None:
        return _Fitter(d).fits([a["id"] for a in eligible(d)])
    return best_set(d) is not None


def set_cost(d: dict[str, Any], ids: Sequence[str]) -> float:
    by_id = {a["id"]: a for a in d["running"]}
    return sum(oracle.cost(d, by_id[i]) for i in ids)
