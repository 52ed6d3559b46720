"""A naive, independent reading of the contract for generated single-vCluster clusters.

Written from the contract text without reusing engine code: brute-force fit
checks and the class_cost formula, used to judge the engine's decisions.
"""

from __future__ import annotations

from datetime import datetime
from itertools import combinations
from typing import Any


def ts(text: str | None, now: float) -> float:
    if text is None:
        return now
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def free_after(d: dict[str, Any], removed: set[str]) -> dict[str, dict[str, float]]:
    free = {n["name"]: dict(n["capacity"]) for n in d["nodes"]}
    for a in d["running"]:
        if a["id"] in removed:
            continue
        for name, res in a["placement"].items():
            for r, amount in res.items():
                free[name][r] = free[name].get(r, 0.0) - amount
    return free


def occupants(d: dict[str, Any], removed: set[str]) -> dict[str, int]:
    count = {n["name"]: 0 for n in d["nodes"]}
    for a in d["running"]:
        if a["id"] not in removed:
            for name in a["placement"]:
                count[name] += 1
    return count


def node_fits(d: dict[str, Any], name: str, removed: set[str]) -> bool:
    req = d["pending"]
    nd = next(n for n in d["nodes"] if n["name"] == name)
    if nd.get("state", "ready") != "ready":
        return False
    free = free_after(d, removed)[name]
    if req.get("exclusive") and occupants(d, removed)[name]:
        return False
    return all(free.get(r, 0.0) + 1e-9 >= a for r, a in req.get("per_node", {}).items())


def fits(d: dict[str, Any], removed: set[str]) -> bool:
    k = d["pending"].get("nodes", 1)
    return sum(node_fits(d, n["name"], removed) for n in d["nodes"]) >= k


def cost(d: dict[str, Any], a: dict[str, Any]) -> float:
    now = ts(d["now"], 0)
    policy = d["policy"]
    ck = a.get("checkpoint", "none")
    start = ts(a.get("started_at"), now)
    if ck == "auto":
        total = a.get("checkpoint_minutes", 5)
    elif ck == "manual":
        total = policy.get("checkpoint_timeout_minutes", 10)
    else:
        since = max(start, ts(a["last_checkpoint_at"], now)) if a.get("last_checkpoint_at") else start
        first = a["placement"][sorted(a["placement"])[0]]
        total = (now - since) / 3600 * len(a["placement"]) * (first.get("gpu", 0) or 1)
    wall = a.get("walltime_minutes")
    if wall is not None:
        f = (now - start) / 60 / wall
        total += 1000 if f >= 0.9 else 1 if f < 0.1 else f * 100
    return float(total)


def class_cost_eligible(d: dict[str, Any], a: dict[str, Any]) -> bool:
    """Eligibility for generated documents (no tenants, vClusters or anti-thrash settings)."""
    now = ts(d["now"], 0)
    req = d["pending"]
    sensitive_req = req.get("sensitive", False) or req.get("preemption_class", 0) == 10
    if a.get("state", "running") != "running":
        return False
    if a.get("sensitive") or a.get("preemption_class", 0) == 10:
        return False
    if a.get("protected_until") and ts(a["protected_until"], now) > now:
        return False
    if not a.get("preemptible", True):
        return False
    if not sensitive_req:
        wall = a.get("walltime_minutes")
        if wall is not None and ts(a.get("started_at"), now) + wall * 60 - now <= 5 * 60:
            return False
        if a.get("checkpoint", "none") == "none" and a.get("preemption_class", 0) >= 7:
            return False
    if not a.get("preemption_class", 0) < req.get("preemption_class", 0):
        return False
    return any(next(n for n in d["nodes"] if n["name"] == name).get("state", "ready") == "ready"
               for name in a["placement"])


def best_class_cost_set(d: dict[str, Any]) -> tuple[float, int, list[str]] | None:
    """Brute force over every subset of eligible allocations, ranked by the contract's rule."""
    now = ts(d["now"], 0)
    req = d["pending"]
    sensitive_req = req.get("sensitive", False) or req.get("preemption_class", 0) == 10
    bound = None if sensitive_req else d["policy"].get("max_victims", 3)
    value = None if sensitive_req else req.get("value")
    eligible = [a for a in d["running"] if class_cost_eligible(d, a)]
    best: tuple[Any, ...] | None = None
    for size in range(1, len(eligible) + 1):
        if bound is not None and size > bound:
            break
        for combo in combinations(eligible, size):
            ids = {a["id"] for a in combo}
            if not fits(d, ids):
                continue
            total = sum(cost(d, a) for a in combo)
            if value is not None and not total < value - 1e-6:
                continue
            earliest = min(ts(a.get("started_at"), now) for a in combo)
            key = (round(total, 6), size, -earliest, sorted(ids))
            if best is None or key < best:
                best = key
    if best is None:
        return None
    return best[0], best[1], best[3]
