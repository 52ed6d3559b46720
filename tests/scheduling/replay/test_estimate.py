"""The start estimate's replay on its own (no database): a case computed by hand, and the
incremental replay against the straightforward one on a generated queue with preemption."""

from __future__ import annotations

import random

import pytest

from scheduling.engine import Cluster, parse_policy
from scheduling.engine import model as em
from scheduling.replay.estimate import estimate_starts, forward_replay

NOW = 1_000_000.0


def test_hand_computed_starts_with_preemption_off():
    """n1 is held until +1200 (R1), n2 half until +540 (R2). P2 (2 GPUs) fits beside R2 at once and
    runs to +1200; P1 and P3 (4 GPUs each) wait for a whole node: n1 and n2 both free at +1200."""
    run = [em.Allocation(id="1", tenant="a", state="running", started_at=NOW - 600, walltime_minutes=30,
                         per_node={"gpu": 4.0}, placement={"n1": {"gpu": 4.0}}, submitted_at=NOW - 700),
           em.Allocation(id="2", tenant="b", state="running", started_at=NOW - 60, walltime_minutes=10,
                         per_node={"gpu": 2.0}, placement={"n2": {"gpu": 2.0}}, submitted_at=NOW - 100)]
    cluster = Cluster([em.Node("n1", {"gpu": 4.0}), em.Node("n2", {"gpu": 4.0})], run,
                      [em.Tenant("a", 0.5), em.Tenant("b", 0.5)])
    pending = [em.Allocation(id="11", tenant="a", per_node={"gpu": 4.0}, walltime_minutes=60, submitted_at=NOW - 50),
               em.Allocation(id="12", tenant="b", per_node={"gpu": 2.0}, walltime_minutes=20, submitted_at=NOW - 40),
               em.Allocation(id="13", tenant="b", per_node={"gpu": 4.0}, walltime_minutes=None, submitted_at=NOW - 30)]
    starts = estimate_starts(cluster, parse_policy({"kind": "class_cost", "enabled": False}), pending, NOW,
                             default_walltime_s=3600)
    assert {k: v - NOW for k, v in starts.items()} == {11: 1200.0, 12: 0.0, 13: 1200.0}
    assert cluster.allocs.keys() == {"1", "2"}  # the group's snapshot is left as it was


@pytest.mark.parametrize("policy", [
    {"kind": "class_cost", "mode": "suspend", "max_victims": 3, "min_runtime_minutes": 10},
    {"kind": "fair_share", "mode": "suspend", "starvation_timeout_s": 0},
    {"kind": "priority", "mode": "requeue"},
])
def test_incremental_estimate_is_the_straightforward_one(policy):
    rng = random.Random(5)
    tenants = [em.Tenant(f"t{i}", 0.25) for i in range(4)]
    running = []
    for i in range(60):
        wall = rng.choice([60, 120, 240])
        started = NOW - rng.uniform(0, wall * 60)
        running.append(em.Allocation(
            id=str(1000 + i), tenant=f"t{i % 4}", state="running", started_at=started, walltime_minutes=wall,
            per_node={"gpu": 4.0}, placement={f"n{i:03d}": {"gpu": 4.0}}, submitted_at=started - 60,
            preemption_class=rng.randint(1, 4), priority=rng.choice([10, 20, 30])))
    cluster = Cluster([em.Node(f"n{i:03d}", {"gpu": 4.0}) for i in range(60)], running, tenants)
    pending = [em.Allocation(id=str(i + 1), tenant=f"t{rng.randint(0, 3)}", per_node={"gpu": float(rng.choice([1, 2, 4]))},
                             nodes=rng.choice([1, 1, 2]), walltime_minutes=rng.choice([30, 90, None]),
                             submitted_at=NOW - 500 + i, preemption_class=rng.randint(1, 4),
                             priority=rng.choice([10, 20, 30])) for i in range(80)]
    rng.shuffle(pending)  # an order of the pass's own (a score), not the kind's key
    both = [estimate_starts(cluster, parse_policy(policy), pending, NOW, default_walltime_s=7200, incremental=inc)
            for inc in (False, True)]
    assert both[0] == both[1]
    assert sum(at is not None and at > NOW for at in both[0].values()) > 5  # some of it waits


def test_starvation_under_way_goes_on_from_when_it_began():
    """b has been below its share since 500 s ago; it starves 600 s after that, at +100, and takes
    the node from a (over its share), which would otherwise run until +4200."""
    run = [em.Allocation(id="1", tenant="a", state="running", started_at=NOW - 3000, walltime_minutes=120,
                         per_node={"gpu": 4.0}, placement={"n1": {"gpu": 4.0}}, submitted_at=NOW - 3100)]
    cluster = Cluster([em.Node("n1", {"gpu": 4.0})], run,
                      [em.Tenant("a", 0.5), em.Tenant("b", 0.5, below_fair_share_since=NOW - 500)])
    pending = [em.Allocation(id="2", tenant="b", per_node={"gpu": 4.0}, walltime_minutes=60, submitted_at=NOW - 500)]
    policy = parse_policy({"kind": "fair_share", "mode": "requeue", "starvation_timeout_s": 600,
                           "aggressive_starvation_timeout_s": 600, "preemptive_scheduling_backoff_s": 0})
    assert estimate_starts(cluster, policy, pending, NOW, default_walltime_s=3600) == {2: NOW + 100}


def test_the_replay_decides_nothing_once_every_pending_request_has_started():
    """Victims asked to leave are requeued behind the pending requests: once the last of those has
    started, the rest of that pass is not decided. Run on to the end instead, the same replay gives
    each pending request the same first start."""
    rng = random.Random(8)
    running = [em.Allocation(id=str(1000 + i), tenant=f"t{i % 2}", state="running", started_at=NOW - 3600,
                             walltime_minutes=240, per_node={"gpu": 4.0}, placement={f"n{i:02d}": {"gpu": 4.0}},
                             submitted_at=NOW - 3700, preemption_class=1) for i in range(20)]
    cluster = Cluster([em.Node(f"n{i:02d}", {"gpu": 4.0}) for i in range(20)], running,
                      [em.Tenant("t0", 0.5), em.Tenant("t1", 0.5)])
    pending = [em.Allocation(id=str(i + 1), tenant=f"t{i % 2}", per_node={"gpu": float(rng.choice([1, 2, 4]))},
                             walltime_minutes=60, submitted_at=NOW - 100 + i, preemption_class=3) for i in range(12)]
    policy = parse_policy({"kind": "class_cost", "mode": "suspend", "max_victims": 3})
    sim, ids = forward_replay(cluster, policy, pending, NOW, default_walltime_s=3600)
    watched_when_decided = []
    decide = sim._decide

    def counted(st, t, waited):
        watched_when_decided.append(bool(sim.watch))
        decide(st, t, waited)

    sim._decide = counted
    sim.run()
    full, _ = forward_replay(cluster, policy, pending, NOW, default_walltime_s=3600)
    full.watch = None  # on until nothing is left to happen
    full.run()
    starts = {i: sim.rec.first_start.get(i) for i in ids}
    assert starts == {i: full.rec.first_start.get(i) for i in ids}
    assert all(at == NOW for at in starts.values())  # each preempts a class-1 job at once
    assert watched_when_decided and all(watched_when_decided)
    assert sim.engine_calls < full.engine_calls
