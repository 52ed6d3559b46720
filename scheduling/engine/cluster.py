"""The indexed snapshot of one resource group that ``decide()`` reads.

Built once from the rows (or a document), then kept current with ``add`` and
``remove`` as decisions are applied: an update touches only the allocation's own
slot, its placement entries and a few per-node and per-tenant sums, so a pass
never rebuilds it per request.

Columns are numpy arrays so that one decision judges every allocation and every
node with a handful of array operations instead of Python loops. Orderings that
depend only on the snapshot (ids, walk orders) are cached per ``version``.
"""

from __future__ import annotations

import gc
import math
from collections.abc import Callable, Iterable
from dataclasses import replace
from itertools import chain, repeat
from operator import attrgetter, eq
from typing import Any

import numpy as np
import numpy.typing as npt

from .model import DEFAULT_SESSION_TYPE, Allocation, Node, SessionType, Tenant, VCluster
from .slot_entries import SlotEntries

EPS = 1e-9
FArr = npt.NDArray[np.float64]
IArr = npt.NDArray[np.int64]
BArr = npt.NDArray[np.bool_]

CHECKPOINT_CODE = {"auto": 0, "manual": 1, "none": 2}
JOBTYPE_BIT = {"exclusive": 1, "forced": 2, "backfill": 4}
NO_VC = -1
MIXED = -2
CACHE_KEYS = 64  # cached values per snapshot; one decision uses about fifteen
ID_WIDTH = 128  # characters of an id the snapshot keeps
ID_START_WIDTH = 16
KEPT_PATCH_NODES = 256  # node changes past which a kept value is built again, not patched
NAN_FOR_NONE: dict[Any, float] = {None: math.nan}  # .get(v, v): NaN for None, else v


NO_KEY = -1  # an id without an integer key (see _id_key)
DEAD_KEY = np.iinfo(np.int64).max  # above every key: dead slots sort last


def _id_key(ident: str) -> int:
    """An integer ordered as the id is in code-point order, for ids of at most 8 ASCII characters
    without NUL: the bytes, padded with NULs (which sort before any character), read big-endian.
    Any other id gets NO_KEY and the order falls back to sorting the strings."""
    if len(ident) > 8 or not ident.isascii() or "\0" in ident:
        return NO_KEY
    return int.from_bytes(ident.encode("ascii").ljust(8, b"\0"), "big")


def _id_keys(ids: list[str], longest: int) -> IArr | list[int]:
    """``_id_key`` of each id (the longest ``longest`` characters); at once (as 8-byte big-endian
    integers) when every id qualifies."""
    joined = "".join(ids)
    if ids and longest <= 8 and joined.isascii() and "\0" not in joined:
        keys: IArr = np.array(ids, dtype="S8").view(">u8").astype(np.int64)
        return keys
    return [_id_key(i) for i in ids]


class Cluster:
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

        self.user_index: dict[str | None, int] = {}
        self._init_slots(max(16, len(running)), len(self.res_names))
        self._init_entries(max(16, len(amounts)), len(self.res_names))
        self.version = 0
        self.state_version = 0  # bumped by state-only changes, which leave cached values in place
        self._cache: dict[Any, Any] = {}
        # Values kept across allocation changes and patched on the nodes those touched (``kept``):
        # the nodes each add/remove touched, in order, and a version of everything else.
        self._node_log: list[int] = []
        self._log_base = 0  # what _node_log[0] is the position of
        self.struct_version = 0
        self._kept: dict[Any, tuple[int, int, Any]] = {}
        ids = list(map(attrgetter("id"), running))
        slot_of = dict(zip(ids, range(len(ids)), strict=True))
        if len(slot_of) == len(running):
            self._add_all(running, ids, slot_of)
            self._add_all_entries(placements, n_nodes_of, amounts)
        else:  # a repeated id replaces the earlier allocation, as add() does
            for a in running:
                self.add(a)

    def _build_nodes(self, node_list: list[Node], amounts: list[dict[str, float]]) -> None:
        """The node columns, and the resources: every name a node has or an allocation holds."""
        self.nodes: dict[str, Node] = {n.name: n for n in node_list}
        self.node_names: list[str] = [n.name for n in node_list]
        self.node_index: dict[str, int] = {name: i for i, name in enumerate(self.node_names)}
        capacities = list(map(attrgetter("capacity"), node_list))
        self.res_names: list[str] = sorted({"gpu"}.union(*capacities, *amounts))
        self.res_index: dict[str, int] = {r: i for i, r in enumerate(self.res_names)}
        n_nodes, n_res = len(node_list), len(self.res_names)
        self.cap: FArr = np.zeros((n_nodes, n_res))
        for r, name in enumerate(self.res_names):
            self.cap[:, r] = np.fromiter(map(dict.get, capacities, repeat(name), repeat(0.0)), np.float64,
                                         count=n_nodes)
        self.used: FArr = np.zeros((n_nodes, n_res))
        self.count: IArr = np.zeros(n_nodes, dtype=np.int64)
        self.ready: BArr = np.fromiter(map(eq, map(attrgetter("state"), node_list), repeat("ready")), bool,
                                       count=n_nodes)
        self.total: FArr = self.cap.sum(axis=0) if n_nodes else np.zeros(n_res)

    def _build_vclusters(self, node_list: list[Node], vclusters: Iterable[VCluster], use_vclusters: bool) -> None:
        """The vClusters' columns and each node's home and borrower."""
        n_nodes = len(node_list)
        self.use_vclusters = use_vclusters
        vcs = list(vclusters) if use_vclusters else []
        self.vclusters: dict[str, VCluster] = {v.name: v for v in vcs}
        self.vc_names: list[str] = [v.name for v in vcs]
        self.vc_index: dict[str, int] = {v.name: i for i, v in enumerate(vcs)}
        self.vc_type: list[str] = [v.type for v in vcs]
        self.vc_sensitive: BArr = np.array([v.type == "sensitive" for v in vcs] + [False], dtype=bool)
        self.vc_service: BArr = np.array([v.type == "service" for v in vcs] + [False], dtype=bool)
        # Work outside any vCluster (the last entry) may be taken by aggressive preemption.
        self.vc_aggressive: BArr = np.array([v.allow_aggressive_preemption for v in vcs] + [True], dtype=bool)
        vc_of = self.vc_index.get  # what _vc gives, for every node at once (None is no name there)
        self.node_vc: IArr = np.fromiter(map(vc_of, map(attrgetter("vcluster"), node_list), repeat(NO_VC)),
                                         np.int64, count=n_nodes)
        self.node_bb: IArr = np.fromiter(map(vc_of, map(attrgetter("borrowed_by"), node_list), repeat(NO_VC)),
                                         np.int64, count=n_nodes)
        self.vc_home_count: IArr = np.bincount(self.node_vc[self.node_vc >= 0], minlength=len(vcs))
        lent = (self.node_vc >= 0) & (self.node_bb >= 0)
        self.vc_lent: IArr = np.bincount(self.node_vc[lent], minlength=len(vcs))

    def _build_tenants_and_types(self, tenants: Iterable[Tenant], session_types: Iterable[SessionType]) -> None:
        """The tenants' and the session types' columns."""
        self.tenants: dict[str, Tenant] = {t.name: t for t in tenants}
        # When the group last started work by preemption (fair_share's backoff); None: never.
        self.last_preemption_at: float | None = None
        self.tenant_index: dict[str | None, int] = {}
        self.t_fair: FArr = np.zeros(0)
        self.t_burst: BArr = np.zeros(0, dtype=bool)
        self.t_used: FArr = np.zeros((0, len(self.res_names)))
        for t in self.tenants.values():
            self._tenant(t.name)

        sts = list(session_types)
        self.session_types: dict[str, SessionType] = {s.name: s for s in sts}
        self.st_index: dict[str, int] = {s.name: i for i, s in enumerate(sts)}
        all_st = [*sts, DEFAULT_SESSION_TYPE]
        self.st_default = len(sts)
        self.st_prio: IArr = np.array([s.priority for s in all_st], dtype=np.int64)
        self.st_rank: IArr = np.array([s.rank for s in all_st], dtype=np.int64)
        self.st_preemptable: BArr = np.array([s.preemptable for s in all_st], dtype=bool)
        # -1: the type sets no max_preemptions_per_job (the policy's applies)
        self.st_maxp: IArr = np.array([-1 if s.max_preemptions_per_job is None else s.max_preemptions_per_job
                                       for s in all_st], dtype=np.int64)

    # -- indexes -----------------------------------------------------------------
    def _vc(self, name: str | None) -> int:
        if name is None:
            return NO_VC
        return self.vc_index.get(name, NO_VC)

    def _tenant(self, name: str | None) -> int:
        idx = self.tenant_index.get(name)
        if idx is None:
            idx = len(self.tenant_index)
            self.tenant_index[name] = idx
            t = self.tenants.get(name) if name is not None else None
            self.t_fair = np.append(self.t_fair, t.fair_share if t else 0.0)
            self.t_burst = np.append(self.t_burst, t is not None and t.burst_allowance is not None)
            self.t_used = np.vstack([self.t_used, np.zeros((1, len(self.res_names)))])
        return idx

    def _user(self, name: str | None) -> int:
        return self.user_index.setdefault(name, len(self.user_index))

    def _init_slots(self, size: int, n_res: int) -> None:
        self.objs: list[Allocation | None] = [None] * size
        self.slot_of: dict[str, int] = {}
        self._free_slots: list[int] = []
        self._next_slot = 0
        self.alive = np.zeros(size, dtype=bool)
        # Ids as wide as the longest so far (at most ID_WIDTH): a 500,000-row U128 column is 256 MB.
        self.a_ids = np.zeros(size, dtype=f"U{ID_START_WIDTH}")
        self.a_idkey = np.full(size, NO_KEY, dtype=np.int64)  # see _id_key
        self.a_class = np.zeros(size, dtype=np.int64)
        self.a_prio = np.zeros(size, dtype=np.int64)
        self.a_running = np.zeros(size, dtype=bool)
        self.a_start = np.full(size, np.nan)
        self.a_wall = np.full(size, np.nan)
        self.a_ckpt = np.zeros(size, dtype=np.int64)
        self.a_ckpt_min = np.zeros(size)
        self.a_last_ckpt = np.full(size, np.nan)
        self.a_sens = np.zeros(size, dtype=bool)
        self.a_prot = np.full(size, -np.inf)
        self.a_preemptible = np.zeros(size, dtype=bool)
        self.a_jobtypes = np.zeros(size, dtype=np.int64)
        self.a_pcount = np.zeros(size, dtype=np.int64)
        self.a_tenant = np.zeros(size, dtype=np.int64)
        self.a_user = np.zeros(size, dtype=np.int64)
        self.a_vc = np.full(size, NO_VC, dtype=np.int64)
        self.a_st = np.zeros(size, dtype=np.int64)
        self.a_rank = np.zeros(size, dtype=np.int64)  # its own rank, else its session type's
        self.a_held = np.zeros((size, n_res))
        self.a_nnodes = np.zeros(size, dtype=np.int64)
        self.a_first_gpu = np.zeros(size)
        self.a_on_borrowed = np.zeros(size, dtype=bool)
        self.a_borrow_home = np.full(size, NO_VC, dtype=np.int64)
        self.a_entries = SlotEntries()

    _SLOT_ARRAYS = ("alive", "a_ids", "a_idkey", "a_class", "a_prio", "a_running", "a_start", "a_wall", "a_ckpt",
                    "a_ckpt_min", "a_last_ckpt", "a_sens", "a_prot", "a_preemptible", "a_jobtypes",
                    "a_pcount", "a_tenant", "a_user", "a_vc", "a_st", "a_rank", "a_held", "a_nnodes", "a_first_gpu",
                    "a_on_borrowed", "a_borrow_home")
    _FILL = {"a_start": np.nan, "a_wall": np.nan, "a_last_ckpt": np.nan, "a_prot": -np.inf,
             "a_vc": NO_VC, "a_borrow_home": NO_VC, "a_idkey": NO_KEY}

    def _grow_slots(self) -> None:
        old = len(self.objs)
        new = old * 2
        self.objs.extend([None] * (new - old))
        for name in self._SLOT_ARRAYS:
            arr = getattr(self, name)
            shape = (new - old, *arr.shape[1:])
            fill = np.full(shape, self._FILL.get(name, 0), dtype=arr.dtype)
            setattr(self, name, np.concatenate([arr, fill]))

    def _init_entries(self, size: int, n_res: int) -> None:
        self.e_alloc = np.full(size, -1, dtype=np.int64)
        self.e_node = np.zeros(size, dtype=np.int64)
        self.e_res = np.zeros((size, n_res))
        self.e_alive = np.zeros(size, dtype=bool)
        self._free_entries: list[int] = []
        self._next_entry = 0

    def _grow_entries(self) -> None:
        old = len(self.e_alloc)
        self.e_alloc = np.concatenate([self.e_alloc, np.full(old, -1, dtype=np.int64)])
        self.e_node = np.concatenate([self.e_node, np.zeros(old, dtype=np.int64)])
        self.e_res = np.concatenate([self.e_res, np.zeros((old, self.e_res.shape[1]))])
        self.e_alive = np.concatenate([self.e_alive, np.zeros(old, dtype=bool)])

    def _ensure_resources(self, names: Iterable[str]) -> None:
        missing = [r for r in names if r not in self.res_index]
        if not missing:
            return
        for r in missing:
            self.res_index[r] = len(self.res_names)
            self.res_names.append(r)
        extra = len(missing)

        def widen(arr: FArr) -> FArr:
            return np.concatenate([arr, np.zeros((arr.shape[0], extra))], axis=1)

        self.cap, self.used, self.t_used = widen(self.cap), widen(self.used), widen(self.t_used)
        self.a_held, self.e_res = widen(self.a_held), widen(self.e_res)
        self.total = np.concatenate([self.total, np.zeros(extra)])
        self.struct_version += 1

    def vec(self, res: dict[str, float]) -> FArr:
        out = np.zeros(len(self.res_names))
        for r, amount in res.items():
            out[self.res_index[r]] = amount
        return out

    # -- allocations -------------------------------------------------------------
    def add(self, alloc: Allocation) -> None:
        """Record a running entry (any state). Touches only its own slot and nodes."""
        if alloc.id in self.slot_of:
            self.remove(alloc.id)
        for amounts_by_name in alloc.placement.values():
            if any(r not in self.res_index for r in amounts_by_name):
                self._ensure_resources(amounts_by_name)
        if self._free_slots:
            slot = self._free_slots.pop()
        else:
            if self._next_slot >= len(self.objs):
                self._grow_slots()
            slot = self._next_slot
            self._next_slot += 1
        self.objs[slot] = alloc
        self.slot_of[alloc.id] = slot
        vc = self._vc(alloc.vcluster)
        tenant = self._tenant(alloc.tenant)
        self.alive[slot] = True
        width = self.a_ids.dtype.itemsize // 4
        if len(alloc.id) > width and width < ID_WIDTH:
            self.a_ids = self.a_ids.astype(f"U{min(ID_WIDTH, max(len(alloc.id), 2 * width))}")
        self.a_ids[slot] = alloc.id
        self.a_idkey[slot] = _id_key(alloc.id)
        self.a_class[slot] = alloc.preemption_class
        self.a_prio[slot] = alloc.priority
        self.a_running[slot] = alloc.state == "running"
        self.a_start[slot] = alloc.started_at if alloc.started_at is not None else np.nan
        self.a_wall[slot] = alloc.walltime_minutes if alloc.walltime_minutes is not None else np.nan
        self.a_ckpt[slot] = CHECKPOINT_CODE[alloc.checkpoint]
        self.a_ckpt_min[slot] = alloc.checkpoint_minutes
        self.a_last_ckpt[slot] = alloc.last_checkpoint_at if alloc.last_checkpoint_at is not None else np.nan
        self.a_sens[slot] = alloc.is_sensitive
        self.a_prot[slot] = alloc.protected_until if alloc.protected_until is not None else -np.inf
        self.a_preemptible[slot] = alloc.preemptible
        self.a_jobtypes[slot] = sum(JOBTYPE_BIT[t] for t in alloc.job_types)
        self.a_pcount[slot] = alloc.preempted_count
        self.a_tenant[slot] = tenant
        self.a_user[slot] = self._user(alloc.user)
        self.a_vc[slot] = vc
        self.a_st[slot] = self.st_index.get(alloc.session_type or "", self.st_default)
        self.a_rank[slot] = alloc.rank if alloc.rank is not None else self.st_rank[self.a_st[slot]]
        names = sorted(alloc.placement)
        first = alloc.placement[names[0]].get("gpu", 0.0) if names else 0.0
        self.a_first_gpu[slot] = first or 1.0
        self.a_nnodes[slot] = len(names)
        held = np.zeros(len(self.res_names))
        entries: list[int] = []
        on_borrowed = False
        borrow_home = NO_VC
        for nname in names:
            node = self.node_index[nname]
            amounts = self.vec(alloc.placement[nname])
            if self._free_entries:
                e = self._free_entries.pop()
            else:
                if self._next_entry >= len(self.e_alloc):
                    self._grow_entries()
                e = self._next_entry
                self._next_entry += 1
            self.e_alloc[e], self.e_node[e], self.e_alive[e] = slot, node, True
            self.e_res[e] = amounts
            entries.append(e)
            held += amounts
            self.used[node] += amounts
            self.count[node] += 1
            self._node_log.append(node)
            home = int(self.node_vc[node])
            if home != NO_VC and home != vc:
                on_borrowed = True
            if vc != NO_VC and home != NO_VC and int(self.node_bb[node]) == vc:
                borrow_home = home if borrow_home in (NO_VC, home) else MIXED
        self.a_entries[slot] = entries
        self.a_held[slot] = held
        self.t_used[tenant] += held
        self.a_on_borrowed[slot] = on_borrowed
        self.a_borrow_home[slot] = borrow_home
        self.version += 1

    def _put(self, name: str, n: int, values: Any) -> None:
        """Slot column ``name``'s first ``n`` values (a fresh snapshot's): the column becomes the
        values themselves when it holds just as many, not a copy of them written into the zeroed one."""
        column = getattr(self, name)
        if len(column) == n and isinstance(values, np.ndarray):
            setattr(self, name, values.astype(column.dtype, copy=False))
        else:  # (a list is converted faster by writing it into an array than by np.asarray)
            column[:n] = values

    def _add_all(self, running: list[Allocation], ids: list[str], slot_of: dict[str, int]) -> None:
        """What ``add`` does for each of ``running`` (distinct ids, and their slots) into a fresh
        snapshot, one column at a time: a 500,000-allocation snapshot without 500,000 calls of
        ``add``."""
        n = len(running)
        self.objs[:n] = running
        self._next_slot = n
        self.slot_of = slot_of
        self.alive[:n] = True
        longest = max(map(len, ids), default=0)
        if longest > ID_START_WIDTH:
            self.a_ids = self.a_ids.astype(f"U{min(ID_WIDTH, longest)}")
        self._put("a_ids", n, ids)
        self._put("a_idkey", n, _id_keys(ids, longest))
        # Plain fields read in C (attrgetter through fromiter), not by a comprehension each.
        def column(name: str, dtype: Any) -> Any:
            return np.fromiter(map(attrgetter(name), running), dtype=dtype, count=n)

        def nullable(name: str) -> FArr:  # None: NaN
            values = list(map(attrgetter(name), running))
            if values.count(None) == n:  # often so (no checkpoint yet, no protection, no rank of its own)
                return np.full(n, np.nan)
            return np.fromiter(map(NAN_FOR_NONE.get, values, values), np.float64, count=n)

        self._put("a_class", n, column("preemption_class", np.int64))
        self._put("a_prio", n, column("priority", np.int64))
        self._put("a_running", n, np.fromiter(map("running".__eq__, map(attrgetter("state"), running)), bool, count=n))
        self._put("a_start", n, nullable("started_at"))
        self._put("a_wall", n, nullable("walltime_minutes"))
        self._put("a_ckpt", n, list(map(CHECKPOINT_CODE.__getitem__, map(attrgetter("checkpoint"), running))))
        self._put("a_ckpt_min", n, column("checkpoint_minutes", np.float64))
        self._put("a_last_ckpt", n, nullable("last_checkpoint_at"))
        self._put("a_sens", n, column("sensitive", bool) | (self.a_class[:n] == 10))
        until = nullable("protected_until")
        self._put("a_prot", n, np.where(np.isnan(until), -np.inf, until))
        self._put("a_preemptible", n, column("preemptible", bool))
        self._put("a_jobtypes", n, (JOBTYPE_BIT["exclusive"] * column("exclusive", np.int64)
                               + JOBTYPE_BIT["forced"] * column("forced", np.int64)
                               + JOBTYPE_BIT["backfill"] * column("backfill", np.int64)))
        self._put("a_pcount", n, column("preempted_count", np.int64))
        tenant = list(map(attrgetter("tenant"), running))
        tenants = {t: self._tenant(t) for t in dict.fromkeys(tenant)}  # indices in order of arrival
        self._put("a_tenant", n, list(map(tenants.__getitem__, tenant)))
        user = list(map(attrgetter("user"), running))
        users = {u: self._user(u) for u in dict.fromkeys(user)}
        self._put("a_user", n, list(map(users.__getitem__, user)))
        vcl = list(map(attrgetter("vcluster"), running))
        vcs = {v: self._vc(v) for v in dict.fromkeys(vcl)}
        self._put("a_vc", n, list(map(vcs.__getitem__, vcl)))
        st_of: dict[str | None, int] = {name: i for name, i in self.st_index.items()}
        st_of[None] = self.st_index.get("", self.st_default)  # no session type: looked up as ""
        self._put("a_st", n, list(map(st_of.get, map(attrgetter("session_type"), running), repeat(self.st_default, n))))
        own_rank = nullable("rank")
        self._put("a_rank", n, np.where(np.isnan(own_rank), self.st_rank[self.a_st[:n]], own_rank).astype(np.int64))
        self.version += n

    def _add_all_entries(self, placements: list[dict[str, dict[str, float]]], n_nodes_of: IArr,
                         amounts: list[dict[str, float]]) -> None:
        """The entries of a fresh snapshot's allocations (``placements``, each with its nodes in name
        order, ``n_nodes_of`` nodes; ``amounts``: every entry's, in that order), a column at a time."""
        n, m = len(placements), len(amounts)
        slots = np.repeat(np.arange(n, dtype=np.int64), n_nodes_of)
        nodes = np.fromiter(map(self.node_index.__getitem__, chain.from_iterable(placements)), np.int64, count=m)
        self.e_alloc[:m], self.e_node[:m], self.e_alive[:m] = slots, nodes, True
        for r, name in enumerate(self.res_names):
            self.e_res[:m, r] = np.fromiter(map(dict.get, amounts, repeat(name), repeat(0.0)), np.float64, count=m)
            self.used[:, r] += np.bincount(nodes, weights=self.e_res[:m, r], minlength=len(self.node_names))
            self.a_held[:n, r] = np.bincount(slots, weights=self.e_res[:m, r], minlength=n)
        self.count += np.bincount(nodes, minlength=len(self.node_names))
        self._next_entry = m
        bounds = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(n_nodes_of, out=bounds[1:])
        self.a_entries = SlotEntries(bounds.tolist())
        self._put("a_nnodes", n, n_nodes_of)
        # The GPUs on its first node (in name order); none, or no placement: 1.
        first = np.zeros(n)
        placed = n_nodes_of > 0
        first[placed] = self.e_res[bounds[:-1][placed], self.res_index["gpu"]]
        self._put("a_first_gpu", n, np.where(first == 0.0, 1.0, first))
        for r in range(len(self.res_names)):
            self.t_used[:, r] += np.bincount(self.a_tenant[:n], weights=self.a_held[:n, r],
                                             minlength=len(self.t_used))
        vc, home = self.a_vc[:n][slots], self.node_vc[nodes]
        self._put("a_on_borrowed", n, np.bincount(slots[(home != NO_VC) & (home != vc)], minlength=n) > 0)
        lent = (vc != NO_VC) & (home != NO_VC) & (self.node_bb[nodes] == vc)
        hi = np.full(n, NO_VC, dtype=np.int64)
        lo = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
        np.maximum.at(hi, slots[lent], home[lent])
        np.minimum.at(lo, slots[lent], home[lent])
        self._put("a_borrow_home", n, np.where(hi == NO_VC, NO_VC, np.where(hi == lo, hi, MIXED)))

    def remove(self, alloc_id: str) -> Allocation | None:
        slot = self.slot_of.pop(alloc_id, None)
        if slot is None:
            return None
        alloc = self.objs[slot]
        for e in self.a_entries.pop(slot):
            node = int(self.e_node[e])
            self.used[node] -= self.e_res[e]
            self.count[node] -= 1
            self._node_log.append(node)
            self.e_alive[e] = False
            self.e_alloc[e] = -1
            self._free_entries.append(e)
        self.t_used[self.a_tenant[slot]] -= self.a_held[slot]
        self.alive[slot] = False
        self.objs[slot] = None
        self._free_slots.append(slot)
        self.version += 1
        return alloc

    def set_state(self, alloc_id: str, state: str) -> bool:
        """Change a running entry's state in place (a victim starts leaving); returns False if absent.
        Cached values stay: what depends on states reads ``a_running`` when used."""
        slot = self.slot_of.get(alloc_id)
        alloc = self.objs[slot] if slot is not None else None
        if slot is None or alloc is None:
            return False
        self.objs[slot] = replace(alloc, state=state)
        self.a_running[slot] = state == "running"
        self.state_version += 1
        return True

    def set_node_state(self, name: str, state: str) -> None:
        i = self.node_index[name]
        self.nodes[name] = replace(self.nodes[name], state=state)
        self.ready[i] = state == "ready"
        self.version += 1
        self.struct_version += 1

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

    # -- Python views for small paths and explanations -------------------------------
    @property
    def allocs(self) -> dict[str, Allocation]:
        return {aid: a for aid in self.slot_of if (a := self.objs[self.slot_of[aid]]) is not None}

    def vcluster_of(self, name: str | None) -> VCluster | None:
        if not self.use_vclusters or name is None:
            return None
        return self.vclusters.get(name)

    def session_type(self, name: str | None) -> SessionType:
        if name is None:
            return DEFAULT_SESSION_TYPE
        return self.session_types.get(name, DEFAULT_SESSION_TYPE)

    def tenant(self, name: str | None) -> Tenant:
        if name is not None and name in self.tenants:
            return self.tenants[name]
        return Tenant(name=name or "")

    def set_below_since(self, name: str, since: float | None) -> None:
        """A tenant's ``below_fair_share_since`` as the scheduler tracks it (read by the gate only,
        so no cached value depends on it)."""
        if name in self.tenants:
            self.tenants[name] = replace(self.tenants[name], below_fair_share_since=since)

    def share_of(self, held: FArr) -> float:
        mask = self.total > 0
        if not mask.any():
            return 0.0
        return float(np.max(held[mask] / self.total[mask], initial=0.0))

    def tenant_shares(self) -> FArr:
        """Dominant share of every tenant index."""
        mask = self.total > 0
        if not mask.any() or not len(self.t_used):
            return np.zeros(len(self.t_used))
        result: FArr = np.max(self.t_used[:, mask] / self.total[mask], axis=1)
        return result

    def tenant_share(self, tenant: str | None, minus_slots: Iterable[int] = ()) -> float:
        idx = self.tenant_index.get(tenant)
        if idx is None:
            return 0.0
        held = self.t_used[idx].copy()
        for s in minus_slots:
            held -= self.a_held[s]
        return self.share_of(held)

    def node_load(self) -> FArr:
        """Largest used/capacity fraction of each node."""
        def build() -> FArr:
            with np.errstate(divide="ignore", invalid="ignore"):
                frac = np.where(self.cap > 0, self.used / np.where(self.cap > 0, self.cap, 1.0), 0.0)
            result: FArr = frac.max(axis=1) if frac.size else np.zeros(len(self.node_names))
            return result

        result: FArr = self.cached("node_load", build)
        return result


def floor_limit(count: int, pct: float) -> int:
    return math.floor(count * pct + EPS)
