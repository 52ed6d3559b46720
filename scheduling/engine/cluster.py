"""The indexed snapshot of one resource group that ``decide()`` reads.

Built once from the rows (or a document), then kept current with ``add`` and
``remove`` as decisions are applied: an update touches only the allocation's own
slot, its placement entries and a few per-node and per-tenant sums, so a pass
never rebuilds it per request.

Columns are numpy arrays so that one decision judges every allocation and every
node with a handful of array operations instead of Python loops. Orderings that
depend only on the snapshot (ids, walk orders) are cached per ``version``.

``Cluster`` is put together from: snapshot_columns.py (the slot and entry columns, the types
and codes), snapshot_build.py (building from rows), snapshot_update.py (``add``, ``remove``,
state changes) and snapshot_views.py (Python views, shares); this module keeps the build's
order, the caches and the cached orderings.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterable
from itertools import chain
from operator import attrgetter
from typing import Any

import numpy as np

from .model import Allocation, Node, SessionType, Tenant, VCluster
from .snapshot_columns import DEAD_KEY, EPS, MIXED, NO_KEY, NO_VC, BArr, FArr, IArr, floor_limit
from .snapshot_update import SnapshotUpdates
from .snapshot_views import SnapshotViews

__all__ = ["EPS", "MIXED", "NO_VC", "BArr", "Cluster", "FArr", "IArr", "floor_limit"]

CACHE_KEYS = 64  # cached values per snapshot; one decision uses about fifteen
KEPT_PATCH_NODES = 256  # node changes past which a kept value is built again, not patched


class Cluster(SnapshotViews, SnapshotUpdates):
    def __init__(
        self,
        nodes: Iterable[Node],
        running: Iterable[Allocation] = (),
        tenants: Iterable[Tenant] = (),
        vclusters: Iterable[VCluster] = (),
        session_types: Iterable[SessionType] = (),
        *,
        use_vclusters: bool = True,
    ) -> None:
        # Building makes lists, dicts and arrays by the hundred thousand and no cycles: the
        # collector, which would walk every object of the process again and again meanwhile, waits
        # until the end.
        paused = gc.isenabled()
        gc.disable()
        try:
            self._build(nodes, list(running), tenants, vclusters, session_types, use_vclusters)
        finally:
            if paused:
                gc.enable()

    def _build(self, nodes: Iterable[Node], running: list[Allocation], tenants: Iterable[Tenant],
               vclusters: Iterable[VCluster], session_types: Iterable[SessionType], use_vclusters: bool) -> None:
        node_list = sorted(nodes, key=attrgetter("name"))
        # Each allocation's placement with its nodes in name order (the order of its entries), and
        # the amounts of every entry in that order: read once, for the resources and the entries.
        placements = list(map(attrgetter("placement"), running))
        n_nodes_of = np.fromiter(map(len, placements), np.int64, count=len(placements))
        for s in np.flatnonzero(n_nodes_of > 1).tolist():
            placements[s] = dict(sorted(placements[s].items()))
        amounts = list(chain.from_iterable(map(dict.values, placements)))
        self._build_nodes(node_list, amounts)
        self._build_vclusters(node_list, vclusters, use_vclusters)
        self._build_tenants_and_types(tenants, session_types)
        self._init_slots(max(16, len(running)), len(self.res_names))
        self._init_entries(max(16, len(amounts)), len(self.res_names))
        self._init_versions()
        # (a comprehension over enumerate builds it faster than dict(zip(ids, range(n))))
        slot_of = {ident: slot for slot, ident in enumerate(map(attrgetter("id"), running))}
        if len(slot_of) == len(running):  # distinct: its keys are the ids in order
            self._add_all(running, list(slot_of), slot_of)
            self._add_all_entries(placements, n_nodes_of, amounts)
        else:  # a repeated id replaces the earlier allocation, as add() does
            for a in running:
                self.add(a)

    # -- cached orderings ----------------------------------------------------------
    def cached(self, key: Any, build: Callable[[], Any]) -> Any:
        """A value that depends only on the snapshot, rebuilt after any update but a state-only
        change (which callers that depend on states apply themselves). Many keys carry the time
        a pass judges as of, so a kept snapshot would gather one set per pass: at most
        CACHE_KEYS are kept, the stale ones dropped first, then the oldest built."""
        hit = self._cache.get(key)
        if hit is not None and hit[0] == self.version:
            return hit[1]
        value = build()
        self._cache.pop(key, None)
        if len(self._cache) >= CACHE_KEYS:
            for old in [k for k, (stamp, _) in self._cache.items() if stamp != self.version]:
                del self._cache[old]
            while len(self._cache) >= CACHE_KEYS:
                del self._cache[next(iter(self._cache))]
        self._cache[key] = (self.version, value)
        return value

    def cached_state(self, key: Any, build: Callable[[], Any]) -> Any:
        """Like ``cached``, for values that also read states (``a_running``): rebuilt after a
        state-only change too."""
        memo: dict[str, tuple[int, Any]] = self.cached(("state", key), dict)
        hit = memo.get("value")
        if hit is not None and hit[0] == self.state_version:
            return hit[1]
        value = build()
        memo["value"] = (self.state_version, value)
        return value

    def kept(self, key: Any, build: Callable[[], Any], patch: Callable[[Any, IArr], Any]) -> Any:
        """Like ``cached``, for values that depend on allocations only through per-node sums
        (``used``, ``count``): after a few allocations arrived or left, ``patch(value, nodes)``
        brings the kept value up to date on the nodes they touched instead of ``build()``
        computing it again. Any other change (a node's state, a new resource) rebuilds it."""
        end = self._log_base + len(self._node_log)
        hit = self._kept.get(key)
        if hit is not None and hit[0] == self.struct_version:
            _, pos, value = hit
            if pos == end:
                return value
            if end - pos <= KEPT_PATCH_NODES:
                touched = sorted(set(self._node_log[pos - self._log_base:]))
                value = patch(value, np.array(touched, dtype=np.int64))
                self._kept[key] = (self.struct_version, end, value)
                return value
        value = build()
        self._kept.pop(key, None)
        while len(self._kept) >= CACHE_KEYS:
            del self._kept[next(iter(self._kept))]
        self._kept[key] = (self.struct_version, end, value)
        if len(self._node_log) > 8 * KEPT_PATCH_NODES:  # older positions are rebuilt anyway
            drop = len(self._node_log) - KEPT_PATCH_NODES
            del self._node_log[:drop]
            self._log_base += drop
        return value

    @property
    def slots(self) -> int:
        return self._next_slot

    def id_rank(self) -> IArr:
        """A key per slot ordering live slots' ids in code-point order (dead slots last); only
        comparisons between keys mean anything. Short ASCII ids (Lattice's own are row ids) carry
        an integer key from the moment they arrive, so after an allocation arrives or leaves the
        order is one vectorised pass, not a sort of every id string."""
        def build() -> IArr:
            n = self._next_slot
            alive = self.alive[:n]
            keys = self.a_idkey[:n]
            if not (keys[alive] == NO_KEY).any():
                return np.where(alive, keys, DEAD_KEY)
            ids = np.where(alive, self.a_ids[:n], "\U0010ffff")
            rank = np.empty(n, dtype=np.int64)
            rank[np.argsort(ids, kind="stable")] = np.arange(n)
            return rank

        result: IArr = self.cached("id_rank", build)
        return result

    def live_entries(self) -> IArr:
        result: IArr = self.cached("live_entries", lambda: np.flatnonzero(self.e_alive[: self._next_entry]))
        return result

    def live_slots_nodes(self) -> tuple[IArr, IArr]:
        """The slot and the node of each live entry, in ``live_entries`` order."""
        def build() -> tuple[IArr, IArr]:
            live = self.live_entries()
            return self.e_alloc[live], self.e_node[live]

        result: tuple[IArr, IArr] = self.cached("live_slots_nodes", build)
        return result

    def node_load(self) -> FArr:
        """Largest used/capacity fraction of each node."""
        def build() -> FArr:
            with np.errstate(divide="ignore", invalid="ignore"):
                frac = np.where(self.cap > 0, self.used / np.where(self.cap > 0, self.cap, 1.0), 0.0)
            result: FArr = frac.max(axis=1) if frac.size else np.zeros(len(self.node_names))
            return result

        result: FArr = self.cached("node_load", build)
        return result
