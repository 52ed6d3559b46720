"""A snapshot kept current as decisions are applied: ``add`` and ``remove`` touch only the
allocation's own slot, its entries and a few per-node and per-tenant sums; a state change is
written in place."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from operator import attrgetter

import numpy as np

from .model import Allocation
from .snapshot_build import SnapshotBuild
from .snapshot_columns import CHECKPOINT_CODE, ID_WIDTH, JOBTYPE_BIT, MIXED, NO_VC, FArr, id_key

FEW_RESOURCES = 8  # rows this wide or narrower are updated element by element
# The fields a slot's own columns are written from, the float ones first (all but the id).
_FLOAT_FIELDS = 5
_SLOT_FIELDS = attrgetter(
    "started_at", "walltime_minutes", "checkpoint_minutes", "last_checkpoint_at", "protected_until",
    "tenant", "user", "vcluster", "session_type", "preemption_class", "priority", "state", "checkpoint",
    "sensitive", "preemptible", "exclusive", "forced", "backfill", "preempted_count", "rank")


class SnapshotUpdates(SnapshotBuild):
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
        res_index = self.res_index
        for amounts_by_name in alloc.placement.values():
            if not amounts_by_name.keys() <= res_index.keys():
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
        self._write_slot(slot, alloc, tenant, vc)
        names = sorted(alloc.placement)
        first = alloc.placement[names[0]].get("gpu", 0.0) if names else 0.0
        self.a_first_gpu[slot] = first or 1.0
        self.a_nnodes[slot] = len(names)
        held, entries, on_borrowed, borrow_home = self._add_entries(slot, alloc, names, vc)
        self.a_entries[slot] = entries
        self._put_row(self.a_held, slot, held)
        self._add_row(self.t_used, tenant, held, 1.0)
        self.a_on_borrowed[slot] = on_borrowed
        self.a_borrow_home[slot] = borrow_home
        self.version += 1

    def _add_entries(self, slot: int, alloc: Allocation, names: list[str],
                     vc: int) -> tuple[list[float], list[int], bool, int]:
        """An entry per node of ``alloc`` (``names``, in order) with its amounts added to the node's
        use: what the allocation holds in all, its entries, and whether and whose nodes it borrows."""
        res_index, used, e_res = self.res_index, self.used, self.e_res
        width = len(self.res_names)
        few = width <= FEW_RESOURCES
        held = [0.0] * width
        entries: list[int] = []
        on_borrowed = False
        borrow_home = NO_VC
        for nname in names:
            node = self.node_index[nname]
            amounts = [0.0] * width
            for r, amount in alloc.placement[nname].items():
                amounts[res_index[r]] = float(amount)
            if self._free_entries:
                e = self._free_entries.pop()
            else:
                if self._next_entry >= len(self.e_alloc):
                    self._grow_entries()
                    e_res = self.e_res
                e = self._next_entry
                self._next_entry += 1
            self.e_alloc[e], self.e_node[e], self.e_alive[e] = slot, node, True
            entries.append(e)
            if few:  # element by element: the same IEEE sums as the rows' operations
                for j, amount in enumerate(amounts):
                    e_res[e, j] = amount
                    used[node, j] = used.item(node, j) + amount
                    held[j] += amount
            else:
                e_res[e] = amounts
                used[node] += amounts
                held = [h + a for h, a in zip(held, amounts, strict=True)]
            self.count[node] += 1
            self._node_log.append(node)
            if not self.vc_names:
                continue  # no vCluster: every node's home and borrower are NO_VC
            home = int(self.node_vc[node])
            if home != NO_VC and home != vc:
                on_borrowed = True
            if vc != NO_VC and home != NO_VC and int(self.node_bb[node]) == vc:
                borrow_home = home if borrow_home in (NO_VC, home) else MIXED
        return held, entries, on_borrowed, borrow_home

    def _write_slot(self, slot: int, alloc: Allocation, tenant: int, vc: int) -> None:
        """The slot's own columns: what ``alloc`` says of itself, apart from its placement. A
        freed slot keeps its values, so where they came from fields equal to ``alloc``'s (a
        pass's reservations, made and taken out again, differ only in their ids) they are
        not written again; a float field at zero is always written (0.0 equals -0.0)."""
        self.alive[slot] = True
        fields = _SLOT_FIELDS(alloc)
        before = self._slot_src.get(slot)
        self._slot_src[slot] = (alloc.id, fields)
        if before is None or before[0] != alloc.id:
            width = self.a_ids.dtype.itemsize // 4
            if len(alloc.id) > width and width < ID_WIDTH:
                self.a_ids = self.a_ids.astype(f"U{min(ID_WIDTH, max(len(alloc.id), 2 * width))}")
            self.a_ids[slot] = alloc.id
            self.a_idkey[slot] = id_key(alloc.id)
        if before is not None and before[1] == fields and 0.0 not in fields[:_FLOAT_FIELDS]:
            return
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
        # The bits of ``job_types``, without making the tuple.
        self.a_jobtypes[slot] = ((JOBTYPE_BIT["exclusive"] if alloc.exclusive else 0)
                                 + (JOBTYPE_BIT["forced"] if alloc.forced else 0)
                                 + (JOBTYPE_BIT["backfill"] if alloc.backfill else 0))
        self.a_pcount[slot] = alloc.preempted_count
        self.a_tenant[slot] = tenant
        self.a_user[slot] = self._user(alloc.user)
        self.a_vc[slot] = vc
        st = self.st_index.get(alloc.session_type or "", self.st_default)
        self.a_st[slot] = st
        self.a_rank[slot] = alloc.rank if alloc.rank is not None else self.st_rank[st]

    @staticmethod
    def _put_row(arr: FArr, i: int, values: list[float]) -> None:
        """``arr[i] = values``; element by element for a few resources (numpy's per-call cost is
        larger than the copy)."""
        if len(values) > FEW_RESOURCES:
            arr[i] = values
            return
        for j, value in enumerate(values):
            arr[i, j] = value

    @staticmethod
    def _add_row(arr: FArr, i: int, values: list[float], sign: float) -> None:
        """``arr[i] += values`` (``sign`` 1) or ``arr[i] -= values`` (-1): the same floats, each an
        IEEE addition or subtraction, element by element for a few resources."""
        if len(values) > FEW_RESOURCES:
            if sign > 0:
                arr[i] += values
            else:
                arr[i] -= values
            return
        for j, value in enumerate(values):
            arr[i, j] = arr.item(i, j) + value if sign > 0 else arr.item(i, j) - value

    def remove(self, alloc_id: str) -> Allocation | None:
        slot = self.slot_of.pop(alloc_id, None)
        if slot is None:
            return None
        alloc = self.objs[slot]
        e_res, used = self.e_res, self.used
        few = len(self.res_names) <= FEW_RESOURCES
        for e in self.a_entries.pop(slot):
            node = int(self.e_node[e])
            if few:
                for j, amount in enumerate(e_res[e].tolist()):
                    used[node, j] = used.item(node, j) - amount
            else:
                used[node] -= e_res[e]
            self.count[node] -= 1
            self._node_log.append(node)
            self.e_alive[e] = False
            self.e_alloc[e] = -1
            self._free_entries.append(e)
        self._add_row(self.t_used, int(self.a_tenant[slot]), self.a_held[slot].tolist(), -1.0)
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
        self._slot_src.pop(slot, None)  # its columns no longer all come from its fields
        self.state_version += 1
        return True

    def set_node_state(self, name: str, state: str) -> None:
        i = self.node_index[name]
        self.nodes[name] = replace(self.nodes[name], state=state)
        self.ready[i] = state == "ready"
        self.version += 1
        self.struct_version += 1
