"""Building a snapshot from rows: the node, vCluster, tenant and session-type columns, the
indexes that number names, and a fresh snapshot's allocations and entries filled a column at a
time (``Cluster._build`` puts these together)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from itertools import chain, repeat
from operator import attrgetter, eq
from typing import Any

import numpy as np

from .model import DEFAULT_SESSION_TYPE, Allocation, Node, SessionType, Tenant, VCluster
from .slot_entries import SlotEntries
from .snapshot_columns import (
    CHECKPOINT_CODE,
    ID_START_WIDTH,
    ID_WIDTH,
    JOBTYPE_BIT,
    MIXED,
    NO_VC,
    BArr,
    FArr,
    IArr,
    SlotColumns,
    id_key,
)


class _Numbering(dict[Any, int]):
    """Numbers its keys in order of arrival: a key not in it gets the next number."""

    def __missing__(self, key: Any) -> int:
        number = self[key] = len(self)
        return number


class SnapshotBuild(SlotColumns):
    def _build_nodes(self, node_list: list[Node], amounts: list[dict[str, float]]) -> None:
        """The node columns, and the resources: every name a node has or an allocation holds."""
        self.node_names: list[str] = list(map(attrgetter("name"), node_list))
        self.nodes: dict[str, Node] = dict(zip(self.node_names, node_list, strict=True))
        self.node_index: dict[str, int] = dict(zip(self.node_names, range(len(node_list)), strict=True))
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
        self.user_index: dict[str | None, int] = {}
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
        self._put_ids(n, ids)
        # Each field read in C (attrgetter through fromiter), straight into its column: no list
        # of 500,000 values first.
        def column(name: str, dtype: Any) -> Any:
            return np.fromiter(map(attrgetter(name), running), dtype=dtype, count=n)

        def nullable(name: str) -> FArr:  # numpy reads None as NaN into a float column
            return np.fromiter(map(attrgetter(name), running), np.float64, count=n)

        self._put("a_class", n, column("preemption_class", np.int64))
        self._put("a_prio", n, column("priority", np.int64))
        self._put("a_running", n, np.fromiter(map(eq, map(attrgetter("state"), running), repeat("running")), bool,
                                              count=n))
        self._put("a_start", n, nullable("started_at"))
        self._put("a_wall", n, nullable("walltime_minutes"))
        self._put("a_ckpt", n, np.fromiter(map(CHECKPOINT_CODE.__getitem__, map(attrgetter("checkpoint"), running)),
                                           np.int64, count=n))
        self._put("a_ckpt_min", n, column("checkpoint_minutes", np.float64))
        self._put("a_last_ckpt", n, nullable("last_checkpoint_at"))
        self._put("a_sens", n, column("sensitive", bool) | (self.a_class[:n] == 10))
        until = nullable("protected_until")
        self._put("a_prot", n, np.where(np.isnan(until), -np.inf, until))
        self._put("a_preemptible", n, column("preemptible", bool))
        # Each flag's bit where it is set, as ``add`` sums the bits of ``job_types``.
        self._put("a_jobtypes", n, (JOBTYPE_BIT["exclusive"] * column("exclusive", bool)
                               + JOBTYPE_BIT["forced"] * column("forced", bool)
                               + JOBTYPE_BIT["backfill"] * column("backfill", bool)))
        self._put("a_pcount", n, column("preempted_count", np.int64))
        self._put("a_tenant", n, self._numbered(running, "tenant", self._tenant))
        self._put("a_user", n, self._numbered(running, "user", self._user))
        self._put("a_vc", n, self._numbered(running, "vcluster", self._vc))
        st_of: dict[str | None, int] = {name: i for name, i in self.st_index.items()}
        st_of[None] = self.st_index.get("", self.st_default)  # no session type: looked up as ""
        self._put("a_st", n, np.fromiter(map(st_of.get, map(attrgetter("session_type"), running),
                                             repeat(self.st_default)), np.int64, count=n))
        own_rank = nullable("rank")
        self._put("a_rank", n, np.where(np.isnan(own_rank), self.st_rank[self.a_st[:n]], own_rank).astype(np.int64))
        self.version += n

    def _put_ids(self, n: int, ids: list[str]) -> None:
        """The id columns of a fresh snapshot: each id (as wide as the longest, at most ID_WIDTH) and
        its ``id_key``. When every id has a key (ASCII, no NUL, at most 8 characters: Lattice's own
        row ids), both come from one array of the ids' bytes, without a pass over the ids for
        their lengths."""
        joined = "".join(ids)
        if ids and len(joined) <= 8 * n and joined.isascii() and "\0" not in joined:
            short = np.array(ids, dtype="S8")  # an id longer than 8 is cut short here: checked next
            if int(np.char.str_len(short).sum()) == len(joined):
                self._put("a_idkey", n, short.view(">u8").astype(np.int64))
                # An ASCII byte is its own code point: the ids as ID_START_WIDTH-wide strings.
                wide = np.zeros((n, ID_START_WIDTH), dtype=np.uint32)
                wide[:, :8] = short.view(np.uint8).reshape(n, 8)
                self._put("a_ids", n, wide.view(f"U{ID_START_WIDTH}").reshape(n))
                return
        longest = max(map(len, ids), default=0)
        if longest > ID_START_WIDTH:
            self.a_ids = self.a_ids.astype(f"U{min(ID_WIDTH, longest)}")
        self._put("a_ids", n, ids)
        self._put("a_idkey", n, [id_key(i) for i in ids])

    @staticmethod
    def _numbered(running: list[Allocation], name: str, index: Callable[[Any], int]) -> IArr:
        """Field ``name`` of each allocation as ``index`` numbers it, in one pass: the values are
        numbered in order of arrival, then ``index`` is called once per distinct value in that
        order (as calling it per allocation would) and the numbers mapped to its answers."""
        seen = _Numbering()
        local = np.fromiter(map(seen.__getitem__, map(attrgetter(name), running)), np.int64, count=len(running))
        codes = np.fromiter(map(index, seen), np.int64, count=len(seen))
        result: IArr = codes[local]
        return result

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
