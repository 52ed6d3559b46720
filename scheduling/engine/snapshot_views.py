"""Python views of a snapshot for small paths and explanations: its allocations, a vCluster,
session type or tenant by name, and dominant shares."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

import numpy as np

from .model import DEFAULT_SESSION_TYPE, Allocation, SessionType, Tenant, VCluster
from .snapshot_build import SnapshotBuild
from .snapshot_columns import FArr


class SnapshotViews(SnapshotBuild):
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
        """The dominant share of ``held``: its largest fraction of a resource the group has, at
        least 0. The same float as ``np.max(held[mask] / total[mask], initial=0.0)``, computed per
        resource in Python (a decision reads it for a vector of a few resources)."""
        best = 0.0
        for j, total in self._share_columns():
            value = float(held[j]) / total
            if value > best:
                best = value
        return best

    def _share_columns(self) -> list[tuple[int, float]]:
        """(index, total) of each resource the group has some of; the totals change only with the
        resources (``struct_version``)."""
        version, cols = self._share_cols
        if version != self.struct_version:
            cols = [(j, total) for j, total in enumerate(self.total.tolist()) if total > 0]
            self._share_cols = (self.struct_version, cols)
        return cols

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
        held = self.t_used[idx]
        if minus_slots:
            held = held.copy()
            for s in minus_slots:
                held -= self.a_held[s]
        return self.share_of(held)
