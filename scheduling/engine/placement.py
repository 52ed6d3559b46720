"""Where a request may run: usable nodes, borrowing limits, fit checks, placement.

Nodes fall in three kinds for a request of vCluster V:
- OWN: V's home nodes (even lent out: the home always wins) and nodes under no
  vCluster rule; never counted as borrowed;
- BORROWED: nodes V already borrows (listed in ``borrowed``; no lending limit);
- LENDABLE: idle nodes of other vClusters V may borrow, within each lender's
  limit. They are idle, so victims never change them: they only add a constant
  number of placeable nodes per group.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import cast

import numpy as np

from .cluster import EPS, NO_VC, BArr, Cluster, FArr, IArr, floor_limit
from .model import Allocation

UNUSABLE, OWN, BORROWED, LENDABLE = -1, 0, 1, 2


def is_non_preemptible(cluster: Cluster, req: Allocation) -> bool:
    vc = cluster.vcluster_of(req.vcluster)
    return (
        (req.checkpoint == "none" and req.preemption_class >= 7)
        or req.is_sensitive
        or (vc is not None and vc.type == "sensitive")
        or not req.preemptible
    )


class RequestView:
    """The request's view of the cluster, computed once per decision with array operations."""

    def __init__(self, cluster: Cluster, req: Allocation) -> None:
        self.cluster = cluster
        self.req = req
        self.k = req.nodes
        self.exclusive = req.exclusive
        key = ("view", tuple(sorted(req.per_node.items())), tuple(sorted(req.labels.items())), req.same,
               req.vcluster, req.exclusive, is_non_preemptible(cluster, req))
        self.shape_key = key  # what values cached per request shape are keyed by

        # What _compute derives from the snapshot and the request's shape alone (every attribute it
        # sets): kept per shape (not changed by state-only changes, which none of it reads),
        # read-only; after allocations arrive or leave, patched on the nodes they touched.
        def build() -> dict[str, object]:
            before = set(vars(self))
            self._compute(cluster, req)
            shape = {name: value for name, value in vars(self).items() if name not in before}
            for value in shape.values():
                if isinstance(value, np.ndarray):
                    value.flags.writeable = False
            return shape

        def patch(shape: dict[str, object], nodes: IArr) -> dict[str, object]:
            return _patched(cluster, shape, nodes)

        self.__dict__.update(cluster.kept(key, build, patch))

    def _compute(self, cluster: Cluster, req: Allocation) -> None:
        n = len(cluster.node_names)
        need = np.zeros(len(cluster.res_names))
        impossible = False
        for r, amount in req.per_node.items():
            if amount <= 0:
                continue
            if r in cluster.res_index:
                need[cluster.res_index[r]] = amount
            else:
                impossible = True
        self.need: FArr = need
        self.need_idx = np.flatnonzero(need > 0)
        ok = cluster.ready.copy()
        if impossible:
            ok[:] = False
        if len(self.need_idx):
            ok &= np.all(cluster.cap[:, self.need_idx] + EPS >= need[self.need_idx], axis=1)
        for key, value in req.labels.items():
            ok &= self._label_mask(key, value)
        codes: IArr = np.zeros(n, dtype=np.int64)
        if req.same:
            codes, present = self._label_codes(req.same)
            ok &= present
        self.group: IArr = codes

        kind: IArr = np.full(n, UNUSABLE, dtype=np.int64)
        vc = cluster.vcluster_of(req.vcluster)
        self.vc_idx = cluster.vc_index[vc.name] if vc is not None else NO_VC
        self.lend_limit: dict[int, int] = {}
        if vc is None:
            kind[ok] = OWN
        else:
            v = self.vc_idx
            own = ok & ((cluster.node_vc == v) | (cluster.node_vc == NO_VC))
            kind[own] = OWN
            if not is_non_preemptible(cluster, req):
                borrowed = ok & ~own & (cluster.node_bb == v)
                kind[borrowed] = BORROWED
                if vc.allow_borrowing:
                    for lname, lender in cluster.vclusters.items():
                        li = cluster.vc_index[lname]
                        if li == v or not lender.allow_lending:
                            continue
                        limit = floor_limit(int(cluster.vc_home_count[li]), lender.max_borrow_pct)
                        limit -= int(cluster.vc_lent[li])
                        if limit > 0:
                            self.lend_limit[li] = limit
                    if self.lend_limit:
                        lenders = np.array(sorted(self.lend_limit), dtype=np.int64)
                        lendable = (ok & (kind == UNUSABLE) & np.isin(cluster.node_vc, lenders)
                                    & (cluster.node_bb == NO_VC) & (cluster.count == 0))
                        kind[lendable] = LENDABLE
        self._ok: BArr = ok
        self._same = bool(req.same)
        self._exclusive = req.exclusive
        self._lenders: IArr = np.array(sorted(self.lend_limit), dtype=np.int64)
        self.kind: IArr = kind
        self.placeable: BArr = (kind == OWN) | (kind == BORROWED)
        self.free: FArr = cluster.cap - cluster.used
        base = self.placeable.copy()
        if len(self.need_idx):
            base &= np.all(self.free[:, self.need_idx] + EPS >= need[self.need_idx], axis=1)
        if self.exclusive:
            base &= cluster.count == 0
        self.base_ok: BArr = base
        usable = kind != UNUSABLE
        # Without a "same" label every node is in group 0: no need to sort them to find it.
        self.groups: IArr = np.unique(codes[usable]) if req.same else np.zeros(int(usable.any()), dtype=np.int64)
        size = int(codes.max()) + 1 if n else 1
        self.base_count: IArr = np.bincount(codes[base], minlength=size)
        self.placeable_count: IArr = np.bincount(codes[self.placeable], minlength=size)
        self.lendable_cap: IArr = _lendable_cap(cluster, kind, codes, self.lend_limit, size)

    def _label_mask(self, key: str, value: str) -> BArr:
        cluster = self.cluster

        def build() -> BArr:
            return np.array([cluster.nodes[nm].labels.get(key) == value for nm in cluster.node_names], dtype=bool)

        result: BArr = cluster.cached(("label", key, value), build)
        return result

    def _label_codes(self, key: str) -> tuple[IArr, BArr]:
        cluster = self.cluster

        def build() -> tuple[IArr, BArr]:
            values = [cluster.nodes[nm].labels.get(key) for nm in cluster.node_names]
            distinct = sorted({v for v in values if v is not None})
            index = {v: i for i, v in enumerate(distinct)}
            codes = np.array([index.get(v, 0) if v is not None else 0 for v in values], dtype=np.int64)
            present = np.array([v is not None for v in values], dtype=bool)
            return codes, present

        result: tuple[IArr, BArr] = cluster.cached(("label_codes", key), build)
        return result

    # -- fit checks ----------------------------------------------------------------
    def fits_now(self) -> bool:
        return bool(np.any(self.base_count + self.lendable_cap >= self.k))

    def usable_if_empty(self) -> bool:
        """NO_USABLE_NODES test: a placement with every allocation gone."""
        return bool(np.any(self.placeable_count + self.lendable_cap >= self.k))

    def is_usable(self, name: str) -> bool:
        i = self.cluster.node_index.get(name)
        return i is not None and self.kind[i] != UNUSABLE

    def fits_node(self, node: int, freed: FArr, gone_entries: int) -> bool:
        if self.exclusive and int(self.cluster.count[node]) != gone_entries:
            return False
        idx = self.need_idx
        return bool(np.all(self.free[node, idx] + freed[idx] + EPS >= self.need[idx]))

    def touched(self, victims: Iterable[int]) -> dict[int, list[int]]:
        """Placeable nodes touched by the victims (slots) -> the entries freed there."""
        cluster = self.cluster
        out: dict[int, list[int]] = {}
        for s in victims:
            for e in cluster.a_entries[s]:
                node = int(cluster.e_node[e])
                if self.placeable[node]:
                    out.setdefault(node, []).append(e)
        return out

    def qualifies(self, node: int, victims: Iterable[int]) -> bool:
        """Does the request fit on this placeable node once ``victims`` (slots) have left?"""
        cluster = self.cluster
        freed = np.zeros(len(cluster.res_names))
        gone = 0
        for s in victims:
            for e in cluster.a_entries[s]:
                if cluster.e_node[e] == node:
                    freed += cluster.e_res[e]
                    gone += 1
        return self.fits_node(node, freed, gone)

    def qualifying_after(self, victims: Sequence[int]) -> BArr:
        ok = self.base_ok.copy()
        cluster = self.cluster
        for node, entries in self.touched(victims).items():
            if not ok[node]:
                freed = cluster.e_res[entries].sum(axis=0)
                ok[node] = self.fits_node(node, freed, len(entries))
        return ok

    def feasible(self, victims: Sequence[int]) -> bool:
        counts: dict[int, int] = {}
        cluster = self.cluster
        for node, entries in self.touched(victims).items():
            if not self.base_ok[node]:
                freed = cluster.e_res[entries].sum(axis=0)
                if self.fits_node(node, freed, len(entries)):
                    g = int(self.group[node])
                    counts[g] = counts.get(g, 0) + 1
        if any(self.base_count[g] + self.lendable_cap[g] + c >= self.k for g, c in counts.items()):
            return True
        return self.fits_now()

    # -- the reported placement ------------------------------------------------------
    def place(self, ok: BArr) -> tuple[list[str], list[str]] | None:
        """Best placement among qualifying nodes: fewest borrowed, then smallest names."""
        names = self.cluster.node_names
        if self.vc_idx == NO_VC and not self._same:  # one group, and every usable node is OWN
            if not len(self.groups):
                return None
            own = np.flatnonzero(ok & (self.kind == OWN))
            return ([names[i] for i in own[: self.k]], []) if len(own) >= self.k else None
        best: tuple[int, list[str], list[str]] | None = None
        own_ok = ok & (self.kind == OWN)
        pool_mask = (ok & (self.kind == BORROWED)) | (self.kind == LENDABLE)
        for g in self.groups.tolist():
            in_g = self.group == g
            own = np.flatnonzero(own_ok & in_g)
            choice: tuple[int, list[str], list[str]]
            if len(own) >= self.k:
                choice = (0, [names[i] for i in own[: self.k]], [])
            else:
                want = self.k - len(own)
                left = dict(self.lend_limit)
                taken: list[int] = []
                for i in np.flatnonzero(pool_mask & in_g).tolist():
                    if len(taken) == want:
                        break
                    if self.kind[i] == LENDABLE:
                        lender = int(self.cluster.node_vc[i])
                        if left[lender] <= 0:
                            continue
                        left[lender] -= 1
                    taken.append(i)
                if len(taken) < want:
                    continue
                chosen = sorted([*own.tolist(), *taken])
                choice = (want, [names[i] for i in chosen], [names[i] for i in sorted(taken)])
            if best is None or (choice[0], choice[1]) < (best[0], best[1]):
                best = choice
        if best is None:
            return None
        return best[1], best[2]


def _lendable_cap(cluster: Cluster, kind: IArr, codes: IArr, lend_limit: dict[int, int], size: int) -> IArr:
    """Per group, how many idle nodes lenders may lend: per lender, its lendable nodes in the
    group up to its limit."""
    out: IArr = np.zeros(size, dtype=np.int64)
    lend_nodes = np.flatnonzero(kind == LENDABLE)
    if len(lend_nodes):
        n_vc = max(1, len(cluster.vc_names))
        pairs, counts = np.unique(codes[lend_nodes] * n_vc + cluster.node_vc[lend_nodes], return_counts=True)
        for pair, c in zip(pairs.tolist(), counts.tolist(), strict=True):
            g, lender = divmod(pair, n_vc)
            out[g] += min(c, lend_limit[lender])
    return out


def _patched(cluster: Cluster, shape: dict[str, object], nodes: IArr) -> dict[str, object]:
    """A request view's shape after allocations arrived or left on ``nodes`` only: what depends
    on what they hold (free amounts, which nodes fit now, idle nodes that may be lent) computed
    again there, the rest kept. The same arrays ``_compute`` would give."""
    new = dict(shape)
    need, idx = cast(FArr, shape["need"]), cast(IArr, shape["need_idx"])
    codes, placeable = cast(IArr, shape["group"]), cast(BArr, shape["placeable"])
    free = cast(FArr, shape["free"]).copy()
    free[nodes] = cluster.cap[nodes] - cluster.used[nodes]
    new["free"] = free
    kind = cast(IArr, shape["kind"])
    lenders = cast(IArr, shape["_lenders"])
    open_ = nodes[(kind[nodes] == UNUSABLE) | (kind[nodes] == LENDABLE)] if len(lenders) else nodes[:0]
    idle = (cast(BArr, shape["_ok"])[open_] & np.isin(cluster.node_vc[open_], lenders)
            & (cluster.node_bb[open_] == NO_VC) & (cluster.count[open_] == 0)) if len(open_) else open_ > 0
    if len(open_) and bool(np.any(idle != (kind[open_] == LENDABLE))):
        kind = kind.copy()
        kind[open_] = np.where(idle, LENDABLE, UNUSABLE)
        new["kind"] = kind
        size = len(cast(IArr, shape["lendable_cap"]))
        new["lendable_cap"] = _lendable_cap(cluster, kind, codes, cast(dict[int, int], shape["lend_limit"]), size)
        usable = kind != UNUSABLE
        new["groups"] = np.unique(codes[usable]) if shape["_same"] else np.zeros(int(usable.any()), dtype=np.int64)
    base = cast(BArr, shape["base_ok"]).copy()
    was = base[nodes]
    now = placeable[nodes].copy()
    if len(idx):
        now &= np.all(free[nodes][:, idx] + EPS >= need[idx], axis=1)
    if shape["_exclusive"]:
        now &= cluster.count[nodes] == 0
    base[nodes] = now
    new["base_ok"] = base
    size = len(cast(IArr, shape["base_count"]))
    new["base_count"] = (cast(IArr, shape["base_count"]) + np.bincount(codes[nodes][now], minlength=size)
                         - np.bincount(codes[nodes][was], minlength=size))
    for value in new.values():
        if isinstance(value, np.ndarray):
            value.flags.writeable = False
    return new


class FitCounter:
    """Incremental feasibility of a changing victim set (for give-back passes)."""

    def __init__(self, view: RequestView, victims: Iterable[int]) -> None:
        self.view = view
        self.cluster = view.cluster
        self.freed: dict[int, FArr] = {}
        self.gone: dict[int, int] = {}
        self.fit: dict[int, bool] = {}
        self.extra: dict[int, int] = {}
        for s in victims:
            self._apply(s, +1)

    def _apply(self, slot: int, sign: int) -> None:
        view, cluster = self.view, self.cluster
        for e in cluster.a_entries[slot]:
            node = int(cluster.e_node[e])
            if not view.placeable[node] or view.base_ok[node]:
                continue
            freed = self.freed.get(node)
            if freed is None:
                freed = self.freed[node] = np.zeros(len(cluster.res_names))
            freed += sign * cluster.e_res[e]
            self.gone[node] = self.gone.get(node, 0) + sign
            now_fits = view.fits_node(node, freed, self.gone[node])
            was = self.fit.get(node, False)
            if now_fits != was:
                g = int(view.group[node])
                self.extra[g] = self.extra.get(g, 0) + (1 if now_fits else -1)
                self.fit[node] = now_fits

    def add(self, slot: int) -> None:
        self._apply(slot, +1)

    def remove(self, slot: int) -> None:
        self._apply(slot, -1)

    def fits(self) -> bool:
        view = self.view
        if any(view.base_count[g] + view.lendable_cap[g] + c >= view.k for g, c in self.extra.items() if c):
            return True
        return view.fits_now()


def give_back(view: RequestView, victims: Sequence[int]) -> list[int]:
    """Give back, in the given order, every victim the request no longer needs; the kept ones,
    sorted. The order is the policy's: the first given back are the ones it most wants to keep."""
    counter = FitCounter(view, victims)
    kept = []
    for s in victims:
        counter.remove(s)
        if not counter.fits():
            counter.add(s)
            kept.append(s)
    return sorted(kept)
