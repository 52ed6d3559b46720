"""A request's view of the cluster, kept across allocations arriving and leaving and patched on
the nodes they touched, equals the view computed afresh."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from scheduling.engine import Allocation, Cluster, Node, VCluster
from scheduling.engine.placement import RequestView

NODES = [Node(f"n{i}", {"gpu": 8, "cpu": 16}, labels={"rack": f"r{i % 3}"},
              vcluster=["a", "b", "b", None][i % 4], borrowed_by="a" if i == 5 else None) for i in range(12)]
VCS = [VCluster(name="a", max_borrow_pct=0.5), VCluster(name="b", max_borrow_pct=0.5)]
REQUESTS = [Allocation(id="p1", vcluster="a", per_node={"gpu": 4}),
            Allocation(id="p2", vcluster="a", nodes=2, per_node={"gpu": 8}, same="rack"),
            Allocation(id="p3", vcluster="b", per_node={"gpu": 2, "cpu": 4}, exclusive=True),
            Allocation(id="p4", vcluster=None, nodes=3, per_node={"gpu": 1})]
ops = st.lists(st.tuples(st.booleans(), st.integers(0, 11), st.sampled_from([0.0, 1.0, 4.0, 8.0]),
                         st.integers(0, 3)), max_size=25)


def _shape(view: RequestView) -> dict[str, object]:
    return {k: v for k, v in vars(view).items() if k not in ("cluster", "req", "k", "exclusive")}


def _same(a: object, b: object) -> bool:
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.shape == b.shape and bool(np.array_equal(a, b))
    return a == b


@given(ops)
def test_a_patched_view_equals_a_fresh_one(steps):
    cluster = Cluster(NODES, [], [], VCS)
    for req in REQUESTS:  # kept from the start, so every later view is patched
        RequestView(cluster, req)
    live: list[str] = []
    for i, (arrive, node, gpu, which) in enumerate(steps):
        if arrive or not live:
            name = f"x{i}"
            cluster.add(Allocation(id=name, vcluster="b", placement={f"n{node}": {"gpu": gpu}}))
            live.append(name)
        else:
            cluster.remove(live.pop(node % len(live)))
        req = REQUESTS[which]
        patched = _shape(RequestView(cluster, req))
        cluster._kept.clear()
        fresh = _shape(RequestView(cluster, req))
        assert patched.keys() == fresh.keys()
        for key in fresh:
            assert _same(patched[key], fresh[key]), key
