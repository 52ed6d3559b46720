"""What lets the incremental replay skip a decision whose answer is known to be "wait".

A pending request is decided by the engine (``decide``) unless one of two facts, each read from
the engine's own snapshot, rules out both ways of starting:

- it cannot fit: fewer nodes have the free capacity it asks per node than it needs nodes (the
  engine's ``fits_now`` needs at least that many, among fewer usable ones);
- it cannot preempt: the policy is off or paused; or no running allocation passes the engine's
  request-independent protections (``eligibility.protections``: min run time, near completion,
  leaving, ...), so no victim can exist; or, by kind, none of those is lower than it in the term
  the kind compares (class_cost: class; priority: priority, and the preemptible ceiling); or, in a
  fair_share group, its tenant is not starving or the backoff holds (the engine's own gates); or
  it asks for more nodes than the nodes with room now plus what ``max_victims`` victims could
  free (each frees only the nodes it is on).

Sensitive requests, requests in a vCluster while any node is lent (reclaim takes any class), and
holders of nodes are always decided. Skipping is only ever skipping a "wait", which changes
nothing in a pass: the replay's results are the straightforward replay's (a test compares them).
Everything is cached per snapshot version and instant, so it is read again only after either moved.
"""

from __future__ import annotations

import numpy as np

from scheduling.engine import Cluster
from scheduling.engine import model as em
from scheduling.engine.cluster import EPS
from scheduling.engine.eligibility import protections

INF = float("inf")


class Bounds:
    """Per-pass bounds on what can start, kept current against the snapshot's version."""

    def __init__(self, policy: em.Policy, borrowing: bool) -> None:
        self.policy = policy
        self.borrowing = borrowing  # some node is lent: a vCluster request may reclaim any class
        self.can_preempt = policy.enabled and not policy.paused
        self._version: tuple[int, int, float] | None = None
        self._fit: dict[tuple[float, float], int] = {}  # nodes with room for (gpus, cpus) now
        self._free: np.ndarray | None = None
        self._victims_read = False
        self._cluster: Cluster | None = None
        self._now = 0.0
        self.any_victim = False
        self.min_class = INF  # lowest class (class_cost) or priority (priority) among possible victims
        self.min_priority = INF
        self.max_span = 0  # the most nodes one possible victim is on

    def refresh(self, cluster: Cluster, now: float) -> None:
        version = (cluster.version, cluster.state_version, now)  # protections lapse with time
        if version == self._version:
            return
        # A state-only change (a victim asked to leave) moves no amount: free capacity stays.
        same_amounts = (self._version is not None and cluster is self._cluster
                        and version[0] == self._version[0])
        self._version = version
        if not same_amounts:
            self._fit.clear()
            self._free = cluster.cap - cluster.used
        self._victims_read = False
        self._cluster, self._now = cluster, now

    def _victims(self) -> None:
        """The possible victims' bounds, read when first needed on this snapshot and instant."""
        self._victims_read = True
        cluster, n = self._cluster, self._cluster.slots
        open_ = np.flatnonzero(protections(cluster, self.policy, self._now, False) == 0)
        self.any_victim = bool(len(open_))
        self.max_span = int(cluster.a_nnodes[:n][open_].max()) if len(open_) else 0
        if self.policy.kind == "class_cost":
            self.min_class = float(cluster.a_class[:n][open_].min()) if len(open_) else INF
        elif self.policy.kind == "priority":
            prio = cluster.a_prio[:n][open_]
            if self.policy.preemptible_priority is not None:
                prio = prio[prio <= self.policy.preemptible_priority]
            self.min_priority = float(prio.min()) if len(prio) else INF

    def fits(self, cluster: Cluster, nodes: int, gpus: float, cpus: float) -> bool:
        """Whether enough nodes have the free capacity (a necessary condition of the engine's fit)."""
        return self.room(cluster, gpus, cpus) >= nodes

    def room(self, cluster: Cluster, gpus: float, cpus: float) -> int:
        """How many nodes have the free capacity for (gpus, cpus) per node now."""
        key = (gpus, cpus)
        found = self._fit.get(key)
        if found is None:
            free = self._free
            assert free is not None
            ok = free[:, cluster.res_index["gpu"]] + EPS >= gpus
            if cpus and "cpu" in cluster.res_index:
                ok &= free[:, cluster.res_index["cpu"]] + EPS >= cpus
            found = self._fit[key] = int(np.count_nonzero(ok))
        return found

    def may_preempt_any(self) -> bool:
        """Whether any request could preempt at all: the policy on, some running work unprotected."""
        if not self.can_preempt:
            return False
        if not self._victims_read:
            self._victims()
        return self.any_victim

    def may_preempt(self, req: em.Allocation, starving: bool, backoff: bool, rest: bool = False) -> bool:
        """False only when the engine could not find a victim for ``req`` on this snapshot; with
        ``rest``, for any request after ``req`` in the queue's order (whatever its own flags)."""
        if not self.can_preempt or (not req.preemptive and not rest):
            return False
        if not rest and (req.is_sensitive or (self.borrowing and req.vcluster is not None)):
            return True
        kind = self.policy.kind
        if kind == "fair_share" and (not starving or backoff):
            return False  # the engine's gates, before any victim is looked for
        if not self._victims_read:
            self._victims()
        if not self.any_victim:
            return False
        if not rest and self._beyond_max_victims(req):
            return False
        if kind == "class_cost":
            return req.preemption_class > self.min_class
        if kind == "priority":
            return req.priority > self.min_priority
        return True

    def _beyond_max_victims(self, req: em.Allocation) -> bool:
        """Whether ``max_victims`` victims cannot make enough nodes qualify for ``req``: a victim
        changes only the nodes it is on, so at most ``max_victims x max_span`` nodes join the
        ones with room now (every kind's selection keeps to the bound)."""
        bound = self.policy.max_victims
        if bound is None or req.nodes < 2 or self._cluster is None:
            return False
        gpus, cpus = req.per_node.get("gpu", 0.0), req.per_node.get("cpu", 0.0)
        return self.room(self._cluster, gpus, cpus) + bound * self.max_span < req.nodes
