"""The incremental replay's bounds (``prune.Bounds``) kept against the snapshot: free capacity
kept across a state-only change (a victim asked to leave moves no amount), the possible victims
read again after it; both read again once allocations move."""

from __future__ import annotations

from scheduling.engine import Cluster, parse_policy
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
