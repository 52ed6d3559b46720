"""The indexed snapshot of one resource group that ``decide()`` reads.

Built once from the rows (or a document) and then kept current with
``add``/``remove`` as decisions are applied, so a scheduler pass never rebuilds
it per request. Every index here is updated in O(size of the allocation).
"""

from __future__ import annotations

from collections.abc import Iterable

from .model import DEFAULT_SESSION_TYPE, Allocation, Node, SessionType, Tenant, VCluster

EPS = 1e-9


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
        self.nodes: dict[str, Node] = {}
        self.used: dict[str, dict[str, float]] = {}
        self.on_node: dict[str, dict[str, None]] = {}
        self.total: dict[str, float] = {}
        self.vc_nodes: dict[str | None, list[str]] = {}
        self.vc_lent: dict[str, int] = {}
        self.borrowed_by_vc: dict[str, list[str]] = {}
        for node in sorted(nodes, key=lambda n: n.name):
            self._add_node(node)
        self.tenants: dict[str, Tenant] = {t.name: t for t in tenants}
        self.vclusters: dict[str, VCluster] = {v.name: v for v in vclusters}
        self.session_types: dict[str, SessionType] = {s.name: s for s in session_types}
        self.use_vclusters = use_vclusters
        self.allocs: dict[str, Allocation] = {}
        self.tenant_used: dict[str | None, dict[str, float]] = {}
        for alloc in running:
            self.add(alloc)

    # -- nodes -------------------------------------------------------------
    def _add_node(self, node: Node) -> None:
        self.nodes[node.name] = node
        self.used[node.name] = {}
        self.on_node[node.name] = {}
        for res, amount in node.capacity.items():
            self.total[res] = self.total.get(res, 0.0) + amount
        self.vc_nodes.setdefault(node.vcluster, []).append(node.name)
        if node.borrowed_by is not None:
            if node.vcluster is not None:
                self.vc_lent[node.vcluster] = self.vc_lent.get(node.vcluster, 0) + 1
            self.borrowed_by_vc.setdefault(node.borrowed_by, []).append(node.name)

    # -- allocations -------------------------------------------------------
    def add(self, alloc: Allocation) -> None:
        """Record a running entry (any state). O(nodes of the allocation)."""
        if alloc.id in self.allocs:
            self.remove(alloc.id)
        self.allocs[alloc.id] = alloc
        tused = self.tenant_used.setdefault(alloc.tenant, {})
        for nname, res in alloc.placement.items():
            used = self.used[nname]
            for r, amount in res.items():
                used[r] = used.get(r, 0.0) + amount
                tused[r] = tused.get(r, 0.0) + amount
            self.on_node[nname][alloc.id] = None

    def remove(self, alloc_id: str) -> Allocation | None:
        alloc = self.allocs.pop(alloc_id, None)
        if alloc is None:
            return None
        tused = self.tenant_used[alloc.tenant]
        for nname, res in alloc.placement.items():
            used = self.used[nname]
            for r, amount in res.items():
                used[r] -= amount
                tused[r] -= amount
            self.on_node[nname].pop(alloc.id, None)
        return alloc

    # -- derived views -----------------------------------------------------
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

    def is_idle(self, node_name: str) -> bool:
        return not self.on_node[node_name]

    def free(self, node_name: str, res: str) -> float:
        return self.nodes[node_name].capacity.get(res, 0.0) - self.used[node_name].get(res, 0.0)

    def load(self, node_name: str) -> float:
        """Largest used/capacity fraction over the node's resources."""
        cap = self.nodes[node_name].capacity
        used = self.used[node_name]
        best = 0.0
        for r, c in cap.items():
            if c > 0:
                best = max(best, used.get(r, 0.0) / c)
        return best

    def share_of(self, res: dict[str, float]) -> float:
        """Dominant share of an amount of resources in this resource group."""
        best = 0.0
        for r, amount in res.items():
            tot = self.total.get(r, 0.0)
            if tot > 0:
                best = max(best, amount / tot)
        return best

    def alloc_share(self, alloc: Allocation) -> float:
        held: dict[str, float] = {}
        for res in alloc.placement.values():
            for r, amount in res.items():
                held[r] = held.get(r, 0.0) + amount
        return self.share_of(held)

    def tenant_share(self, tenant: str | None, minus: Iterable[Allocation] = ()) -> float:
        held = dict(self.tenant_used.get(tenant, {}))
        for a in minus:
            for res in a.placement.values():
                for r, amount in res.items():
                    held[r] = held.get(r, 0.0) - amount
        return self.share_of(held)
