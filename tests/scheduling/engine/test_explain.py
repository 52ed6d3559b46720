"""Explanations a tenant can read: true even when the group has idle nodes the request may not use."""

from __future__ import annotations

from tests.scheduling.engine.helpers import decide, doc, node, run


def test_a_wait_beside_idle_nodes_it_may_not_use_says_so():
    """hpc's only node runs higher-class work; ml's node is idle but ml does not lend."""
    d = doc({"kind": "class_cost"}, [node("h1"), node("m1", vc="ml")], [run("r", "h1", preemption_class=5)],
            {"preemption_class": 1}, vclusters=[{"name": "hpc"}, {"name": "ml", "allow_lending": False}])
    out = decide(d)
    assert (out["outcome"], out["code"]) == ("wait", "NO_FEASIBLE_SET")
    assert out["explanation"] == (
        "p (class 1, priority 10) needs 1 node with gpu=8; it cannot start on free capacity now, and even "
        "preempting every eligible allocation would not free enough room.")


def test_a_preemption_says_where_it_looked_for_room_too():
    d = doc({"kind": "class_cost"}, [node("h1"), node("m1", vc="ml")], [run("r", "h1", preemption_class=1)],
            {"preemption_class": 5}, vclusters=[{"name": "hpc"}, {"name": "ml", "allow_lending": False}])
    out = decide(d)
    assert out["outcome"] == "preempt"
    assert "; no free capacity on the nodes it may use, so 1 allocation (lower-class work) will be" in \
        out["explanation"]
