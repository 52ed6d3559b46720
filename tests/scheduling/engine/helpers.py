"""Tiny builders for decision documents, so each test draws its cluster in a few lines."""

from __future__ import annotations

import copy
from typing import Any

from scheduling.engine import decide_scenario, parse_scenario

NOW = "2026-05-01T12:00:00Z"


def node(name: str, gpu: float = 8, vc: str | None = "hpc", **kw: Any) -> dict[str, Any]:
    return {"name": name, "capacity": {"gpu": gpu}, "vcluster": vc, **kw}


def run(ident: str, where: dict[str, float] | str, gpu: float = 8, **kw: Any) -> dict[str, Any]:
    placement = {where: {"gpu": gpu}} if isinstance(where, str) else {n: {"gpu": g} for n, g in where.items()}
    kw.setdefault("vcluster", "hpc")
    kw.setdefault("started_at", "2026-05-01T11:00:00Z")
    return {"id": ident, "placement": placement, **kw}


def doc(policy: dict[str, Any], nodes: list[dict[str, Any]], running: list[dict[str, Any]],
        pending: dict[str, Any], **extra: Any) -> dict[str, Any]:
    d: dict[str, Any] = {"now": NOW, "policy": policy, "nodes": nodes, "running": running,
                         "pending": {"id": "p", "vcluster": "hpc", "nodes": 1, "per_node": {"gpu": 8},
                                     **pending}}
    if "vclusters" not in extra:
        extra["vclusters"] = [{"name": "hpc"}]
    d.update(extra)
    return d


def decide(d: dict[str, Any]) -> dict[str, Any]:
    return decide_scenario(parse_scenario(copy.deepcopy(d))).to_dict()


def codes(out: dict[str, Any]) -> dict[str, str]:
    return {c["id"]: c["code"] for c in out["candidates"]}


def victims(out: dict[str, Any]) -> list[str]:
    return [v["id"] for v in out["victims"]]
