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
  free (each frees only the nodes it is on); or, in class_cost, fewer nodes than it needs would
  have room even once the ``max_victims`` largest of its possible victims on each left (the
  engine's NO_FEASIBLE_SET or EXCEEDS_MAX_VICTIMS).

Sensitive requests, requests in a vCluster while any node is lent (reclaim takes any class), and
holders of nodes are always decided. Skipping is only ever skipping a "wait", which changes
nothing in a pass: the replay's results are the straightforward replay's (a test compares them).
Everything is cached per snapshot version and instant, so it is read again only after either moved.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from scheduling.engine import Cluster
from scheduling.engine import model as em
from scheduling.engine.cluster import EPS
from scheduling.engine.eligibility import protections

INF = float("inf")
# What a bound on freed capacity adds to the engine's EPS: the engine sums a subset of the amounts
# summed here, in another order, so its sum may be larger in the last bits; this only widens the bound.
SLACK = 1e-6
DENSE_CLASSES = 64  # classes spanning fewer values than this are summed one row per value


class Bounds:
    """Per-pass bounds on what can start, kept current against the snapshot's version."""

    def __init__(self, policy: em.Policy, borrowing: bool) -> None:
        self.policy = policy
        self.borrowing = borrowing  # some node is lent: a vCluster request may reclaim any class
        self.can_preempt = policy.enabled and not policy.paused
        self._version: tuple[int, int, float] | None = None
        self._fit: _Room | None = None  # nodes with room for (gpus, cpus) now
        self._free: np.ndarray | None = None
        self._victims_read = False
        self._victims_of: tuple[Cluster, int, int, float] | None = None  # what ``_open`` was read on
        self._work = 0  # bumped by ``work_moved``
        self._open: np.ndarray | None = None  # the slots no protection holds
        self._loose = _Freeable()  # every preemptible allocation a possible victim
        self._exact = _Freeable()  # the unprotected ones (``_open``)
        self._cluster: Cluster | None = None
        self._now = 0.0
        self.any_victim = False
        self.min_class = INF  # lowest class (class_cost) or priority (priority) among possible victims
        self.min_priority = INF
        self.max_span = 0  # the most nodes one possible victim is on

    def refresh(self, cluster: Cluster, now: float) -> None:
        version = (cluster.version, cluster.state_version, now)  # protections lapse with time
        if version == self._version and cluster is self._cluster:
            return
        # A state-only change (a victim asked to leave) moves no amount: free capacity stays.
        same_amounts = (self._version is not None and cluster is self._cluster
                        and version[0] == self._version[0])
        self._version = version
        if not same_amounts:
            self._fit = None
            self._free = cluster.cap - cluster.used
        if cluster is not self._cluster:
            self._loose.clear()
        # Which allocations no protection holds moves with work, states and time, not with a
        # pass's reservations (never possible victims, and no other allocation's slot moves).
        victims_of = (cluster, self._work, cluster.state_version, now)
        if victims_of != self._victims_of:
            self._victims_of = victims_of
            self._victims_read = False
            self._exact.clear()
        self._exact.rooms.clear()  # free capacity and what victims free, added
        self._cluster, self._now = cluster, now

    def _victims(self) -> None:
        """The possible victims' bounds, read when first needed on this snapshot and instant."""
        self._victims_read = True
        cluster, n = self._cluster, self._cluster.slots
        open_ = np.flatnonzero(protections(cluster, self.policy, self._now, False) == 0)
        self._open = open_
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
        if self._fit is None:
            assert self._free is not None
            self._fit = _Room(self._free, cluster.res_index, EPS)
        return self._fit.count(gpus, cpus)

    def work_moved(self, cluster: Cluster, alloc: em.Allocation, sign: int) -> None:
        """``alloc`` was added to ``cluster`` (``sign`` 1) or left it (-1): the possible victims
        are read again, and its amounts are put into the loose bounds of ``reachable`` (which no
        reservation or state change moves), or these are read again where they cannot be."""
        self._work += 1
        loose = self._loose
        loose.rooms.clear()
        if loose.below is None:
            return
        classes, below = loose.classes, loose.below
        at = int(np.searchsorted(classes, alloc.preemption_class))
        if cluster is not self._cluster or (alloc.preemptible and (
                at == len(classes) or classes[at] != alloc.preemption_class)):
            loose.clear()  # another snapshot, or a class without its row
            return
        if not (alloc.preemptible or alloc.state == "running"):
            return  # counted free (``_loose_free_after``)
        # It takes from what is free for every class but those it is below (rows past its own).
        rows = at + 1 if alloc.preemptible else len(below)
        for name, amounts in alloc.placement.items():
            node = cluster.node_index[name]
            for r, amount in amounts.items():
                column = cluster.res_index.get(r)
                if column is None or column >= below.shape[2]:
                    loose.clear()  # a resource the bounds were not read with
                    return
                below[:rows, node, column] -= sign * amount

    def may_preempt_any(self) -> bool:
        """Whether any request could preempt at all: the policy on, some running work unprotected."""
        if not self.can_preempt:
            return False
        if not self._victims_read:
            self._victims()
        return self.any_victim

    def may_preempt(self, req: em.Allocation, starving: bool, backoff: bool, rest: bool = False,
                    room: bool = False) -> bool:
        """False only when the engine could not find a victim for ``req`` on this snapshot; with
        ``rest``, for any request after ``req`` in the queue's order (whatever its own flags).
        With ``room``, in class_cost, also where victims could not make room for it (``reachable``:
        worth reading for shapes the engine found without a victim set before)."""
        if not self.can_preempt or (not req.preemptive and not rest):
            return False
        if not rest and (req.is_sensitive or (self.borrowing and req.vcluster is not None)):
            return True
        kind = self.policy.kind
        if kind == "fair_share" and (not starving or backoff):
            return False  # the engine's gates, before any victim is looked for
        if kind == "class_cost" and room and not rest and not self.reachable(
                req.preemption_class, req.nodes, req.per_node.get("gpu", 0.0), req.per_node.get("cpu", 0.0)):
            return False
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

    def reachable(self, cls: float, nodes: int, gpus: float, cpus: float) -> bool:
        """class_cost: whether at least ``nodes`` nodes could have the free capacity for (gpus, cpus)
        once possible victims of a class below ``cls`` left it, at most ``max_victims`` of them on
        each (a set of victims frees on a node at most its largest ones there). Where not, the
        engine's pool has no feasible set within the bound. Read first with every preemptible
        allocation counted a possible victim and reservations counted free (kept until work
        moves, ``work_moved``: no protection is read), then, only where that leaves room, on the
        snapshot as it is with the unprotected ones of this instant."""
        if self._room_after(self._loose, cls, gpus, cpus) < nodes:
            return False
        if not self._victims_read:
            self._victims()
        return self._room_after(self._exact, cls, gpus, cpus) >= nodes

    def reachable_any(self, cls: float, shapes: Iterable[tuple[int, float, float]]) -> bool:
        """Whether any request of these (nodes, gpus, cpus) shapes and a class up to ``cls`` could
        find victims that make room for it (``reachable``)."""
        return any(self.reachable(cls, *shape) for shape in shapes)

    def _room_after(self, kept: _Freeable, cls: float, gpus: float, cpus: float) -> int:
        room = kept.rooms.get(cls)
        if room is None:
            assert self._cluster is not None
            room = kept.rooms[cls] = _Room(self._free_after(kept, cls), self._cluster.res_index, SLACK)
        return room.count(gpus, cpus)

    def _free_after(self, kept: _Freeable, cls: float) -> np.ndarray:
        """Per node and resource: the most that could be free once possible victims of a class
        below ``cls`` left. Loosely, with every preemptible allocation a possible victim and no
        reservation counted (``_loose_free_after``); else the free capacity now and, of the
        unprotected ones, the ``max_victims`` largest amounts per resource (all without a bound)."""
        cluster, free = self._cluster, self._free
        assert cluster is not None and free is not None
        slots, nodes = cluster.live_slots_nodes()
        if kept is self._loose:
            if kept.below is None:
                kept.classes, kept.below = _loose_free_after(cluster, slots, nodes)
            return kept.below[int(np.searchsorted(kept.classes, cls))]
        freed = kept.freed.get(cls)
        if freed is None:
            assert self._open is not None
            lower = np.zeros(cluster.slots, dtype=bool)
            lower[self._open] = cluster.a_class[self._open] < cls
            take = lower[slots]
            freed = kept.freed[cls] = _largest_per_node(
                nodes[take], cluster.e_res[cluster.live_entries()[take]], len(cluster.node_names),
                self.policy.max_victims)
        return free + freed


class _Freeable:
    """For one set of possible victims, per class below which they are taken: the rooms their
    leaving could make (kept while the set and the free capacity are), and what they could free
    (while the set is). For the loose set, what is free once those of a lower class left, for
    each of the classes present (``_loose_free_after``)."""

    def __init__(self) -> None:
        self.rooms: dict[float, _Room] = {}
        self.freed: dict[float, np.ndarray] = {}
        self.classes = np.zeros(0)
        self.below: np.ndarray | None = None

    def clear(self) -> None:
        self.rooms.clear()
        self.freed.clear()
        self.below = None


class _Room:
    """How many nodes have what a request asks per node, out of what each has available (nodes x
    resources) plus a tolerance; counted once per (gpus, cpus)."""

    def __init__(self, available: np.ndarray, res_index: dict[str, int], tolerance: float) -> None:
        self.available, self.tolerance = available, tolerance
        self.gpu, self.cpu = res_index["gpu"], res_index.get("cpu")
        self._counts: dict[tuple[float, float], int] = {}

    def count(self, gpus: float, cpus: float) -> int:
        key = (gpus, cpus)
        found = self._counts.get(key)
        if found is None:
            ok = self.available[:, self.gpu] + self.tolerance >= gpus
            if cpus and self.cpu is not None:
                ok &= self.available[:, self.cpu] + self.tolerance >= cpus
            found = self._counts[key] = int(np.count_nonzero(ok))
        return found


def _loose_free_after(cluster: Cluster, slots: np.ndarray, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Classes (sorted, distinct, every live preemptible allocation's among them) and, for the
    i-th of them, per node and resource: its capacity less what allocations other than the
    preemptible ones of a lower class use on it (at i = len(classes), less what the others use).
    What is neither running nor preemptible (a pass's reservations) counts as free, so that
    this moves only when work starts or ends."""
    preemptible = cluster.a_preemptible[slots]
    kept = preemptible | cluster.a_running[slots]
    of = cluster.a_class[slots[preemptible]]
    lo, hi = (int(of.min()), int(of.max())) if len(of) else (0, -1)
    if hi - lo < DENSE_CLASSES:  # a few whole classes: each its own row, without sorting
        classes, at = np.arange(lo, hi + 1), of - lo
    else:
        classes, at = np.unique(of, return_inverse=True)
    n_nodes, n_res = len(cluster.node_names), len(cluster.res_names)
    cells = at * n_nodes + nodes[preemptible]
    amounts = cluster.e_res[cluster.live_entries()]
    out = np.zeros((len(classes) + 1, n_nodes, n_res))
    for r in range(n_res):
        per_class = np.bincount(cells, weights=amounts[preemptible, r], minlength=len(classes) * n_nodes)
        np.cumsum(per_class.reshape(len(classes), n_nodes), axis=0, out=out[1:, :, r])
        out[:, :, r] += cluster.cap[:, r] - np.bincount(nodes[kept], weights=amounts[kept, r], minlength=n_nodes)
    return classes, out


def _largest_per_node(nodes: np.ndarray, amounts: np.ndarray, n_nodes: int, bound: int | None) -> np.ndarray:
    """Per node and resource column, the sum of the ``bound`` largest ``amounts`` of the entries on
    it (every one's when ``bound`` is None)."""
    out = np.zeros((n_nodes, amounts.shape[1]))
    if bound is not None and (not len(nodes) or int(np.bincount(nodes).max()) <= bound):
        bound = None  # no node has more entries than the bound: each node's are all its largest
    for r in range(amounts.shape[1]):
        column = amounts[:, r]
        if bound is None:
            out[:, r] = np.bincount(nodes, weights=column, minlength=n_nodes)
            continue
        order = np.lexsort((-column, nodes))
        on = nodes[order]
        place = np.arange(len(on)) - np.searchsorted(on, on)  # rank within its node, largest first
        keep = place < bound
        out[:, r] = np.bincount(on[keep], weights=column[order][keep], minlength=n_nodes)
    return out
