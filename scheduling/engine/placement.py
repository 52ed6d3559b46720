"""Where a request may run: usable nodes, borrowing limits, fit checks, placement.

Nodes fall in three kinds for a request of vCluster V:
- own: V's home nodes (even lent out: the home always wins) and nodes under no
  vCluster rule; never counted as borrowed;
- borrowed: nodes V already borrows (listed in ``borrowed``; no lending limit);
- lendable: idle nodes of other vClusters V may borrow, within each lender's
  limit. They are idle, so victims never change them: they only add a constant
  number of placeable nodes per group.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from .cluster import EPS, Cluster
from .model import Allocation

OWN, BORROWED, LENDABLE = 0, 1, 2


def is_non_preemptible(cluster: Cluster, req: Allocation) -> bool:
    vc = cluster.vcluster_of(req.vcluster)
    return (
        (req.checkpoint == "none" and req.preemption_class >= 7)
        or req.is_sensitive
        or (vc is not None and vc.type == "sensitive")
        or not req.preemptible
    )


class RequestView:
    """The request's view of the cluster, computed once per decision."""

    def __init__(self, cluster: Cluster, req: Allocation) -> None:
        self.cluster = cluster
        self.req = req
        self.k = req.nodes
        self.need = [(r, a) for r, a in sorted(req.per_node.items()) if a > 0]
        self.exclusive = req.exclusive
        self.kind: dict[str, int] = {}
        self.group_of: dict[str, str] = {}
        self.lender_of: dict[str, str] = {}
        self.lend_limit: dict[str, int] = {}
        vc = cluster.vcluster_of(req.vcluster)
        self.vc = vc
        no_borrow = is_non_preemptible(cluster, req)
        for name in self._candidate_nodes(vc, no_borrow):
            node = cluster.nodes[name]
            if not self._static_ok(name):
                continue
            if vc is None or node.vcluster is None or node.vcluster == vc.name:
                self.kind[name] = OWN
            elif node.borrowed_by == vc.name:
                self.kind[name] = BORROWED
            else:
                self.kind[name] = LENDABLE
                self.lender_of[name] = node.vcluster
        # groups ("same" label) and the constant capacity lendable nodes add
        self.groups: dict[str, list[str]] = {}
        for name in self.kind:
            g = cluster.nodes[name].labels[req.same] if req.same else ""
            self.group_of[name] = g
            self.groups.setdefault(g, []).append(name)
        self.lendable_cap: dict[str, int] = {}
        for g, names in self.groups.items():
            per_lender: dict[str, int] = {}
            for name in names:
                if self.kind[name] == LENDABLE:
                    lender = self.lender_of[name]
                    per_lender[lender] = per_lender.get(lender, 0) + 1
            self.lendable_cap[g] = sum(min(c, self.lend_limit[lender]) for lender, c in per_lender.items())
        self.base_ok: set[str] = {n for n, kd in self.kind.items() if kd != LENDABLE and self.qualifies(n, None)}
        self.base_count: dict[str, int] = {g: 0 for g in self.groups}
        for n in self.base_ok:
            self.base_count[self.group_of[n]] += 1

    def _candidate_nodes(self, vc: object, no_borrow: bool) -> Iterable[str]:
        cluster = self.cluster
        if self.vc is None:
            return cluster.nodes.keys()
        vname = self.vc.name
        names: list[str] = list(cluster.vc_nodes.get(vname, ()))
        names.extend(cluster.vc_nodes.get(None, ()))
        if no_borrow:
            return names
        names.extend(cluster.borrowed_by_vc.get(vname, ()))
        if not self.vc.allow_borrowing:
            return names
        for lender_name, lender in cluster.vclusters.items():
            if lender_name == vname or not lender.allow_lending:
                continue
            home = cluster.vc_nodes.get(lender_name, ())
            limit = math.floor(len(home) * lender.max_borrow_pct + EPS) - cluster.vc_lent.get(lender_name, 0)
            if limit <= 0:
                continue
            self.lend_limit[lender_name] = limit
            for name in home:
                node = cluster.nodes[name]
                if node.borrowed_by is None and cluster.is_idle(name):
                    names.append(name)
        return names

    def _static_ok(self, name: str) -> bool:
        node = self.cluster.nodes[name]
        if node.state != "ready":
            return False
        labels = node.labels
        for k, v in self.req.labels.items():
            if labels.get(k) != v:
                return False
        if self.req.same and self.req.same not in labels:
            return False
        cap = node.capacity
        return all(cap.get(r, 0.0) + EPS >= a for r, a in self.need)

    # -- fit checks ----------------------------------------------------------
    def qualifies(self, name: str, gone: Iterable[Allocation] | None) -> bool:
        """Does the request fit on this own/borrowed node once ``gone`` have left?"""
        cluster = self.cluster
        node = cluster.nodes[name]
        used = cluster.used[name]
        freed: dict[str, float] = {}
        gone_ids: set[str] = set()
        if gone is not None:
            for a in gone:
                res = a.placement.get(name)
                if res is None:
                    continue
                gone_ids.add(a.id)
                for r, amount in res.items():
                    freed[r] = freed.get(r, 0.0) + amount
        if self.exclusive and any(i not in gone_ids for i in cluster.on_node[name]):
            return False
        cap = node.capacity
        for r, amount in self.need:
            if cap.get(r, 0.0) - used.get(r, 0.0) + freed.get(r, 0.0) + EPS < amount:
                return False
        return True

    def touched(self, victims: Iterable[Allocation]) -> dict[str, list[Allocation]]:
        out: dict[str, list[Allocation]] = {}
        for a in victims:
            for name in a.placement:
                kd = self.kind.get(name)
                if kd is not None and kd != LENDABLE:
                    out.setdefault(name, []).append(a)
        return out

    def qualifying_after(self, victims: Iterable[Allocation]) -> set[str]:
        ok = set(self.base_ok)
        for name, gone in self.touched(victims).items():
            if name not in ok and self.qualifies(name, gone):
                ok.add(name)
        return ok

    def feasible(self, victims: Iterable[Allocation]) -> bool:
        counts = dict(self.base_count)
        for name, gone in self.touched(victims).items():
            if name not in self.base_ok and self.qualifies(name, gone):
                counts[self.group_of[name]] += 1
        return any(counts[g] + self.lendable_cap[g] >= self.k for g in counts)

    def fits_now(self) -> bool:
        return any(self.base_count[g] + self.lendable_cap[g] >= self.k for g in self.groups)

    def usable_if_empty(self) -> bool:
        """NO_USABLE_NODES test: a placement with every allocation gone."""
        for g, names in self.groups.items():
            count = sum(1 for n in names if self.kind[n] != LENDABLE)
            if count + self.lendable_cap[g] >= self.k:
                return True
        return False

    # -- the reported placement ----------------------------------------------
    def place(self, ok: set[str]) -> tuple[list[str], list[str]] | None:
        """Best placement among qualifying nodes: fewest borrowed, then smallest names."""
        best: tuple[int, list[str], list[str]] | None = None
        for names in self.groups.values():
            own = sorted(n for n in names if n in ok and self.kind[n] == OWN)
            if len(own) >= self.k:
                choice: tuple[int, list[str], list[str]] = (0, own[: self.k], [])
            else:
                want = self.k - len(own)
                pool = sorted(
                    n for n in names
                    if (self.kind[n] == BORROWED and n in ok) or self.kind[n] == LENDABLE
                )
                left = dict(self.lend_limit)
                taken: list[str] = []
                for n in pool:
                    if len(taken) == want:
                        break
                    if self.kind[n] == LENDABLE:
                        lender = self.lender_of[n]
                        if left[lender] <= 0:
                            continue
                        left[lender] -= 1
                    taken.append(n)
                if len(taken) < want:
                    continue
                choice = (want, sorted(own + taken), sorted(taken))
            if best is None or (choice[0], choice[1]) < (best[0], best[1]):
                best = choice
        if best is None:
            return None
        return best[1], best[2]

    def is_usable(self, name: str) -> bool:
        return name in self.kind
