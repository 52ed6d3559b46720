"""The incremental replay's bounds (``prune.Bounds``) kept against the snapshot: free capacity
kept across a state-only change (a victim asked to leave moves no amount), the possible victims
read again after it; both read again once allocations move."""

from __future__ import annotations

from scheduling.engine import Cluster, decide, parse_policy
from scheduling.engine import model as em
from scheduling.replay.prune import Bounds

NOW = 1_000_000.0


def test_a_victim_leaving_is_no_victim_and_frees_nothing_until_it_has_left():
    running = [em.Allocation(id="1", tenant="a", state="running", started_at=NOW - 3600, per_node={"gpu": 4.0},
                             placement={"n1": {"gpu": 4.0}}, preemption_class=1)]
    cluster = Cluster([em.Node("n1", {"gpu": 4.0}), em.Node("n2", {"gpu": 4.0})], running, [em.Tenant("a", 1.0)])
    bounds = Bounds(parse_policy({"kind": "class_cost", "mode": "suspend"}), False)
    bounds.refresh(cluster, NOW)
    assert bounds.fits(cluster, 1, 4.0, 0.0) and not bounds.fits(cluster, 2, 4.0, 0.0)
    assert bounds.may_preempt_any() and bounds.min_class == 1

    cluster.set_state("1", "checkpointing")
    bounds.refresh(cluster, NOW)
    assert not bounds.may_preempt_any()  # leaving: protected
    assert not bounds.fits(cluster, 2, 4.0, 0.0)  # its GPUs are still held

    cluster.remove("1")
    bounds.refresh(cluster, NOW)
    assert bounds.fits(cluster, 2, 4.0, 0.0)


def _full(placements: dict[str, dict[str, dict[str, float]]]) -> Cluster:
    running = [em.Allocation(id=ident, tenant="a", state="running", started_at=NOW - 3600, per_node={"gpu": 4.0},
                             placement=where, preemption_class=1) for ident, where in placements.items()]
    nodes = [em.Node(f"n{i}", {"gpu": 4.0}) for i in range(5)]
    return Cluster(nodes, running, [em.Tenant("a", 1.0)])


def test_a_request_for_more_nodes_than_max_victims_can_free_is_told_to_wait_without_the_engine():
    policy = parse_policy({"kind": "class_cost", "mode": "suspend", "max_victims": 2})
    request = em.Allocation(id="p", tenant="a", per_node={"gpu": 4.0}, nodes=4, preemption_class=5,
                            submitted_at=NOW)
    singles = _full({f"s{i}": {f"n{i}": {"gpu": 4.0}} for i in range(4)})  # n4 free: 1 + 2 x 1 < 4
    pairs = _full({"g0": {"n0": {"gpu": 4.0}, "n1": {"gpu": 4.0}},  # 1 + 2 x 2 >= 4: the engine decides
                   "g1": {"n2": {"gpu": 4.0}, "n3": {"gpu": 4.0}}})
    for cluster, possible in ((singles, False), (pairs, True)):
        bounds = Bounds(policy, False)
        bounds.refresh(cluster, NOW)
        assert bounds.may_preempt(request, False, False) is possible
        assert (decide(cluster, policy, request, NOW).outcome == "preempt") is possible
        assert bounds.may_preempt(request, False, False, rest=True)  # later requests may need fewer nodes
