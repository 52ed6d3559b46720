"""Which capacity limit keeps a request from starting now: the binding limit, named.

``decide()`` says why preemption cannot help a waiting request; this module says why the request
does not simply fit, from the same snapshot. The limits are lifted one at a time, in a fixed order;
the first whose lifting alone would let the request start on free capacity now is the one that
binds (docs/decisions.md, "Why a request waits"):

1. ``FITS_NOW``: nothing binds; the next pass starts it.
2. ``BORROW_LIMIT``: its own vCluster may not borrow (``allow_borrowing`` false, or the request
   cannot be preempted, so it runs on its own nodes only) while idle nodes elsewhere would hold it.
3. ``LENDING_CAP``: idle nodes of another vCluster would hold it, but that lender already lends all
   it may (floor(home nodes x ``max_borrow_pct``)) or does not lend.
4. ``NODES_UNAVAILABLE``: nodes that would hold it are draining, drained, degraded, down or unknown.
5. ``CONSTRAINTS``: its labels (or ``same``) exclude the free nodes that would hold it.
6. ``PRIORITY``: it would fit in what is being freed (victims leaving, nodes held for preemptors),
   which goes to work ahead of it in the queue.
7. ``RESOURCES``: not enough capacity anywhere it may run.

Pure: no Django, no clock; the facts are plain numbers and names (vClusters, node states), never
another tenant's work.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .cluster import EPS, NO_VC, BArr, Cluster, FArr, IArr, floor_limit
from .model import Allocation
from .placement import RequestView, is_non_preemptible

CAPACITY_CODES = ("FITS_NOW", "BORROW_LIMIT", "LENDING_CAP", "NODES_UNAVAILABLE", "CONSTRAINTS", "PRIORITY",
                  "RESOURCES")


@dataclass(frozen=True)
class Binding:
    code: str
    facts: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class _Lift:
    """Which limits a check sets aside."""

    borrow: bool = False  # the request's own vCluster's (or its non-preemptibility's) bar on borrowing
    caps: bool = False  # lenders' caps and their allow_lending
    states: bool = False  # nodes not ready count as ready
    labels: bool = False  # constraints.labels and constraints.same
    leaving: bool = False  # what victims and holds are freeing counts as free


class _Check:
    """The request's fit on free capacity, with some limits set aside (array operations)."""

    def __init__(self, cluster: Cluster, req: Allocation) -> None:
        self.cluster, self.req = cluster, req
        self.view = RequestView(cluster, req)
        n = len(cluster.node_names)
        need = self.view.need
        idx = self.view.need_idx
        impossible = any(a > 0 and r not in cluster.res_index for r, a in req.per_node.items())
        self.shape: BArr = np.full(n, not impossible, dtype=bool)
        if len(idx):
            self.shape &= np.all(cluster.cap[:, idx] + EPS >= need[idx], axis=1)
        labels: BArr = np.ones(n, dtype=bool)
        for key, value in req.labels.items():
            labels &= np.array([cluster.nodes[nm].labels.get(key) == value for nm in cluster.node_names],
                               dtype=bool)
        if req.same:
            labels &= np.array([req.same in cluster.nodes[nm].labels for nm in cluster.node_names], dtype=bool)
        self.labels = labels
        leaving = cluster.alive & ~cluster.a_running
        self.freed: FArr = np.zeros_like(cluster.used)
        self.gone: IArr = np.zeros(n, dtype=np.int64)
        for slot in np.flatnonzero(leaving).tolist():
            for e in cluster.a_entries.get(slot, []):
                self.freed[int(cluster.e_node[e])] += cluster.e_res[e]
                self.gone[int(cluster.e_node[e])] += 1
        vc = cluster.vcluster_of(req.vcluster)
        self.vc = vc
        self.v = cluster.vc_index[vc.name] if vc is not None else NO_VC
        self.may_borrow = vc is not None and vc.allow_borrowing and not is_non_preemptible(cluster, req)

    def ok(self, lift: _Lift) -> BArr:
        """Nodes the request could ever use under ``lift``, whatever is free."""
        ok = self.shape.copy()
        if not lift.labels:
            ok &= self.labels
        if not lift.states:
            ok &= self.cluster.ready
        return ok

    def free_fit(self, lift: _Lift) -> BArr:
        cluster, view = self.cluster, self.view
        free = cluster.cap - cluster.used + (self.freed if lift.leaving else 0.0)
        count = cluster.count - (self.gone if lift.leaving else 0)
        idx = view.need_idx
        fit: BArr = np.ones(len(cluster.node_names), dtype=bool)
        if len(idx):
            fit &= np.all(free[:, idx] + EPS >= view.need[idx], axis=1)
        if self.req.exclusive:
            fit &= count == 0
        return fit

    def kinds(self, lift: _Lift) -> tuple[BArr, dict[int, BArr], dict[int, int]]:
        """(own-or-borrowed nodes, each lender's lendable nodes, each lender's remaining cap)."""
        cluster = self.cluster
        ok = self.ok(lift)
        if self.vc is None:
            return ok, {}, {}
        own = ok & ((cluster.node_vc == self.v) | (cluster.node_vc == NO_VC))
        if not (self.may_borrow or lift.borrow) and is_non_preemptible(cluster, self.req):
            return own, {}, {}
        mine = own | (ok & (cluster.node_bb == self.v))
        if not (self.may_borrow or lift.borrow):
            return mine, {}, {}
        idle = ok & ~mine & (cluster.node_bb == NO_VC) & (cluster.node_vc != NO_VC)
        idle &= (cluster.count - (self.gone if lift.leaving else 0)) == 0
        lendable: dict[int, BArr] = {}
        caps: dict[int, int] = {}
        for name, lender in cluster.vclusters.items():
            li = cluster.vc_index[name]
            if li == self.v or (not lender.allow_lending and not lift.caps):
                continue
            cap = floor_limit(int(cluster.vc_home_count[li]), lender.max_borrow_pct) - int(cluster.vc_lent[li])
            caps[li] = len(cluster.node_names) if lift.caps else max(cap, 0)
            lendable[li] = idle & (cluster.node_vc == li)
        return mine, lendable, caps

    def groups(self, lift: _Lift) -> IArr:
        if self.req.same and not lift.labels:
            return self.view.group
        return np.zeros(len(self.cluster.node_names), dtype=np.int64)

    def fits(self, lift: _Lift) -> bool:
        mine, lendable, caps = self.kinds(lift)
        fit = self.free_fit(lift)
        codes = self.groups(lift)
        size = int(codes.max()) + 1 if len(codes) else 1
        total = np.bincount(codes[mine & fit], minlength=size)
        for li, mask in lendable.items():
            total += np.minimum(np.bincount(codes[mask], minlength=size), caps[li])
        return bool(np.any(total >= self.req.nodes))


def binding_limit(cluster: Cluster, req: Allocation) -> Binding:
    """The first limit, in the module's order, whose lifting alone lets ``req`` start now."""
    check = _Check(cluster, req)
    if check.fits(_Lift()):
        return Binding("FITS_NOW")
    vc = check.vc
    if vc is not None and not check.may_borrow and check.fits(_Lift(borrow=True, caps=True)):
        why = "not_preemptible" if is_non_preemptible(cluster, req) else "not_allowed"
        return Binding("BORROW_LIMIT", {"vcluster": vc.name, "why": why,
                                        "idle_elsewhere": _idle_elsewhere(check)})
    if check.may_borrow and check.fits(_Lift(caps=True)):
        return Binding("LENDING_CAP", {"vcluster": vc.name if vc else None, "lenders": _lenders(check)})
    if check.fits(_Lift(states=True)):
        return Binding("NODES_UNAVAILABLE", {"states": _unavailable(check)})
    if check.fits(_Lift(labels=True)):
        would = check.free_fit(_Lift()) & check.kinds(_Lift(labels=True))[0] & ~check.labels
        return Binding("CONSTRAINTS", {"labels": dict(sorted(req.labels.items())), "same": req.same,
                                       "free_nodes_without": int(would.sum())})
    if check.fits(_Lift(leaving=True)):
        freeing = (check.gone > 0) & check.kinds(_Lift(leaving=True))[0] & check.free_fit(_Lift(leaving=True))
        return Binding("PRIORITY", {"nodes_being_freed": int(freeing.sum())})
    mine = check.kinds(_Lift())[0]
    return Binding("RESOURCES", {"nodes": req.nodes, "per_node": dict(sorted(req.per_node.items())),
                                 "usable_nodes": int(mine.sum()),
                                 "with_room": int((mine & check.free_fit(_Lift())).sum())})


def _idle_elsewhere(check: _Check) -> int:
    mine, lendable, _ = check.kinds(_Lift(borrow=True, caps=True))
    fit = check.free_fit(_Lift())
    return int(sum(int((mask & fit).sum()) for mask in lendable.values()))


def _lenders(check: _Check) -> list[dict[str, Any]]:
    """Each vCluster with idle nodes that would hold the request but lends no more."""
    cluster = check.cluster
    _, lendable, _ = check.kinds(_Lift(caps=True))
    fit = check.free_fit(_Lift())
    out = []
    for li, mask in sorted(lendable.items()):
        idle = int((mask & fit).sum())
        name = cluster.vc_names[li]
        lender = cluster.vclusters[name]
        cap = floor_limit(int(cluster.vc_home_count[li]), lender.max_borrow_pct)
        lent = int(cluster.vc_lent[li])
        if idle and (not lender.allow_lending or lent >= cap):
            out.append({"vcluster": name, "idle_nodes": idle, "lent": lent, "cap": cap,
                        "home_nodes": int(cluster.vc_home_count[li]), "max_borrow_pct": lender.max_borrow_pct,
                        "allow_lending": lender.allow_lending})
    return out


def _unavailable(check: _Check) -> dict[str, int]:
    """Nodes out of service that would hold the request, by state."""
    cluster = check.cluster
    mine, lendable, _ = check.kinds(_Lift(states=True))
    could = mine.copy()
    for mask in lendable.values():
        could |= mask
    could &= ~cluster.ready & check.free_fit(_Lift())
    out: dict[str, int] = {}
    for i in np.flatnonzero(could).tolist():
        state = cluster.nodes[cluster.node_names[i]].state
        out[state] = out.get(state, 0) + 1
    return dict(sorted(out.items()))
