"""The cluster a replay runs on (from a JSON spec; a resource group's is read in ``history``) and
the policy it runs under (a policy file, checked by the engine's own parser).

A spec: ``nodes`` (a count), ``gpus_per_node``, optional ``cpus_per_node``; ``vclusters`` (each
an engine vCluster with ``nodes``, how many of the nodes are its home, assigned in order; the rest
have no home); ``session_types`` (engine session types); ``tenants`` (``name``, ``fair_share``);
``default_fair_share``: a tenant of the trace the spec does not list gets this share, or
``"equal"`` (1 / the number of tenants in the trace) when it is the word.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any

from scheduling.engine import InvalidDocument, parse_policy, parse_scenario
from scheduling.engine import model as em
from scheduling.engine.reader import NUMBER_LIMIT

from .trace import Job, ReplayError, check_text

_SPEC_FIELDS = {"nodes", "gpus_per_node", "cpus_per_node", "vclusters", "session_types", "tenants",
                "default_fair_share", "name"}
# A spec's nodes are made one by one (named n00000 to n99999): a count past this is a typo, not a
# cluster, and would be allocated before anything else could refuse it.
MAX_NODES = 100_000


@dataclass
class ClusterSpec:
    name: str
    nodes: list[em.Node]
    vclusters: list[em.VCluster] = field(default_factory=list)
    session_types: list[em.SessionType] = field(default_factory=list)
    tenants: dict[str, em.Tenant] = field(default_factory=dict)
    default_fair_share: float | str = 0.0

    @property
    def gpus_per_node(self) -> float:
        return max((n.capacity.get("gpu", 0.0) for n in self.nodes), default=0.0)

    def tenants_for(self, jobs: list[Job]) -> list[em.Tenant]:
        """The spec's tenants plus every tenant of the trace, with its fair share."""
        names = sorted({j.tenant for j in jobs} | set(self.tenants))
        share = (1.0 / len(names) if names else 0.0) if self.default_fair_share == "equal" \
            else float(self.default_fair_share)
        return [self.tenants.get(n) or em.Tenant(name=n, fair_share=share) for n in names]

    def admit(self, jobs: list[Job], skipped: Counter) -> list[Job]:
        """The jobs as this cluster can take them, as admission would: a vCluster or session type
        the spec does not have is dropped (the job runs outside any), CPUs are dropped on a spec
        without them, and a job no node could ever hold is left out (counted in ``skipped``)."""
        vcs, sts = {v.name for v in self.vclusters}, {s.name for s in self.session_types}
        has_cpu = any(n.capacity.get("cpu") for n in self.nodes)
        largest = self.gpus_per_node
        largest_cpu = max((n.capacity.get("cpu", 0.0) for n in self.nodes), default=0.0)
        out = []
        for j in jobs:
            j = replace(j, vcluster=j.vcluster if j.vcluster in vcs else None,
                        session_type=j.session_type if j.session_type in sts else None,
                        cpus=j.cpus if has_cpu else 0.0)
            if j.gpus > largest or j.nodes > len(self.nodes) or (has_cpu and j.cpus > largest_cpu):
                skipped["larger than any node or the cluster"] += 1
                continue
            out.append(j)
        return out

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "nodes": len(self.nodes),
                "gpus": sum(n.capacity.get("gpu", 0.0) for n in self.nodes),
                "gpus_per_node": self.gpus_per_node,
                "vclusters": {v.name: sum(1 for n in self.nodes if n.vcluster == v.name) for v in self.vclusters},
                "session_types": [s.name for s in self.session_types]}


def load_json(path: str, what: str) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError) as exc:
        raise ReplayError(f"{what} {path}: {exc}") from exc
    except RecursionError:  # json's decoder recurses once per level of nesting
        raise ReplayError(f"{what} {path}: nested too deeply to be read") from None
    check_text(doc, f"{what} {path}")
    return doc


def load_policy(path: str) -> em.Policy:
    doc = load_json(path, "policy")
    if isinstance(doc, dict) and isinstance(doc.get("policy"), dict):
        doc = doc["policy"]  # a decision document or a saved group policy
    try:
        return parse_policy(doc)
    except InvalidDocument as exc:
        raise ReplayError(f"policy {path}: " + "; ".join(f"{p or 'policy'}: {m}" for p, m in exc.errors)) from exc


def load_spec(path: str) -> ClusterSpec:
    doc = load_json(path, "cluster spec")
    if not isinstance(doc, dict):
        raise ReplayError(f"cluster spec {path}: must be a JSON object")
    unknown = sorted(set(doc) - _SPEC_FIELDS)
    if unknown:
        raise ReplayError(f"cluster spec: unknown field {unknown[0]!r} ({', '.join(sorted(_SPEC_FIELDS))})")
    count, gpus, cpus = doc.get("nodes"), doc.get("gpus_per_node"), doc.get("cpus_per_node", 0)
    for key, value, hi in (("nodes", count, MAX_NODES), ("gpus_per_node", gpus, NUMBER_LIMIT),
                           ("cpus_per_node", cpus, NUMBER_LIMIT)):
        if isinstance(value, bool) or not isinstance(value, int) or value < (0 if key == "cpus_per_node" else 1):
            raise ReplayError(f"cluster spec: {key} must be a positive integer")
        if value > hi:
            raise ReplayError(f"cluster spec: {key} must be at most {hi}, not {value}")
    assert isinstance(count, int) and isinstance(gpus, int) and isinstance(cpus, int)
    homes: list[str | None] = []
    vc_docs = doc.get("vclusters") or []
    if not isinstance(vc_docs, list):
        raise ReplayError("cluster spec: vclusters: must be a list")
    for i, vc in enumerate(vc_docs):
        if not isinstance(vc, dict):
            raise ReplayError(f"cluster spec: vclusters[{i}]: must be an object")
        n = vc.get("nodes", 0)
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ReplayError(f"cluster spec: vclusters[{i}].nodes must be a non-negative integer")
        if len(homes) + n > count:  # checked before the list is made: a count may be any size
            raise ReplayError(f"cluster spec: the vclusters' nodes ({len(homes) + n}) are more than nodes ({count})")
        homes += [vc.get("name")] * n
    capacity = {"gpu": float(gpus), **({"cpu": float(cpus)} if cpus else {})}
    nodes = [{"name": f"n{i:05d}", "capacity": capacity, "vcluster": homes[i] if i < len(homes) else None}
             for i in range(count)]
    scenario = _checked(doc, nodes, vc_docs)
    default = doc.get("default_fair_share", 0.0)
    if default != "equal" and (isinstance(default, bool) or not isinstance(default, int | float)
                               or not 0 <= default < math.inf):
        raise ReplayError("cluster spec: default_fair_share must be a non-negative number or \"equal\"")
    return ClusterSpec(name=str(doc.get("name") or path), nodes=list(scenario.nodes),
                       vclusters=list(scenario.vclusters), session_types=list(scenario.session_types),
                       tenants={t.name: t for t in scenario.tenants}, default_fair_share=default)


def _checked(doc: dict[str, Any], nodes: list[dict[str, Any]], vc_docs: list[Any]) -> em.Scenario:
    """The spec's parts read by the engine's parser, so every error names its field."""
    scenario_doc = {
        "now": "2000-01-01T00:00:00Z", "policy": {"kind": "class_cost"}, "nodes": nodes, "running": [],
        "pending": {"id": "spec", "per_node": {"gpu": 0}},
        "vclusters": [{k: v for k, v in vc.items() if k != "nodes"} for vc in vc_docs],
        "session_types": doc.get("session_types") or [], "tenants": doc.get("tenants") or [],
    }
    try:
        return parse_scenario(scenario_doc)
    except InvalidDocument as exc:
        raise ReplayError("cluster spec: " + "; ".join(f"{p}: {m}" for p, m in exc.errors)) from exc
