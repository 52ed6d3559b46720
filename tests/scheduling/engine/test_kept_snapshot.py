"""A snapshot kept across the decisions of a pass (victims leaving between them) must decide every
request exactly as a snapshot built afresh from the same state would: whatever the engine keeps
between decisions (orderings, per-node bounds patched where the pool changed) may only save work."""

from __future__ import annotations

import copy
import random
from dataclasses import replace

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduling.engine import decide, parse_scenario
from scheduling.engine.cluster import Cluster
from scheduling.engine.decide import _gates
from scheduling.engine.eligibility import judge
from scheduling.engine.placement import RequestView
from scheduling.engine.select import pool_entries, potential_nodes
from scheduling.engine.select_bounds import lower_bounds, pool_mask


def _document(seed: int, n_nodes: int) -> dict:
    """A busy cluster of mixed splits and classes, large enough for the pool to be more than a
    handful of entries (a few changing is then a small part of it)."""
    rnd = random.Random(seed)
    nodes, running = [], []
    for i in range(n_nodes):
        name = f"n{i:03d}"
        nodes.append({"name": name, "capacity": {"gpu": 8, "cpu": 64}})
        split = rnd.choice([[8], [4, 4], [4, 2, 2], [2, 2, 2, 2], [6, 2], [2, 2, 2, 1, 1]])  # full nodes
        for j, gpu in enumerate(split + [0] * rnd.randint(0, 2)):
            running.append({
                "id": f"a{i:03d}{j}", "placement": {name: {"gpu": gpu, "cpu": 4}},
                "preemption_class": rnd.choice([0, 1, 2, 3, 5]),
                "checkpoint": rnd.choice(["auto", "manual", "none"]),
                "checkpoint_minutes": rnd.choice([3, 5, 12]),
                "started_at": f"2026-05-01T{rnd.randint(6, 11):02d}:{rnd.randint(0, 59):02d}:00Z",
                **({"walltime_minutes": rnd.choice([240, 480])} if rnd.random() < 0.3 else {}),
            })
    for k in range(n_nodes // 10):  # a few gangs across two nodes (the same pair may come twice)
        a, b = rnd.sample(range(n_nodes), 2)
        running.append({"id": f"g{k:03d}-{a:03d}-{b:03d}", "placement": {f"n{a:03d}": {"gpu": 0, "cpu": 8},
                                                                 f"n{b:03d}": {"gpu": 0, "cpu": 8}},
                        "preemption_class": 1, "checkpoint": "auto", "started_at": "2026-05-01T09:00:00Z"})
    return {"now": "2026-05-01T12:00:00Z", "policy": {"kind": "class_cost", "max_victims": 4},
            "nodes": nodes, "running": running,
            "pending": {"id": "p", "nodes": 1, "per_node": {"gpu": 8}, "preemption_class": 9}}


def _fresh(d: dict, states: dict[str, str]) -> Cluster:
    s = parse_scenario(copy.deepcopy(d))
    running = [replace(a, state=states.get(a.id, a.state)) for a in s.running]
    return Cluster(s.nodes, running, s.tenants, s.vclusters, s.session_types, use_vclusters=s.has_vclusters)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10**6), shapes=st.lists(st.sampled_from([
    {"gpu": 8}, {"gpu": 4}, {"gpu": 6, "cpu": 8}, {"gpu": 8, "exclusive": True}, {"gpu": 2}]), min_size=1, max_size=3))
def test_kept_snapshot_decides_as_a_fresh_one(seed, shapes):
    _decides_as_a_fresh_one(_document(seed, 120), shapes)


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 10**6), order=st.sampled_from(["oldest", "newest"]), shapes=st.lists(st.sampled_from([
    {"gpu": 8}, {"gpu": 4}, {"gpu": 6, "cpu": 8}, {"gpu": 8, "exclusive": True}, {"gpu": 2}]), min_size=1, max_size=3))
def test_kept_priority_pools_decide_as_a_fresh_snapshot(seed, order, shapes):
    """priority keeps what each pool gives (potential nodes, per-node victims) and patches it on
    the nodes whose pool changed: the decisions are those of a fresh snapshot."""
    d = _document(seed, 120)
    d["policy"] = {"kind": "priority", "max_victims": 4, "preemption_order": order}
    d["pending"]["priority"] = 100  # above every running allocation's: they are all candidates
    _decides_as_a_fresh_one(d, shapes)


def _decides_as_a_fresh_one(d: dict, shapes: list[dict]) -> None:
    scenario = parse_scenario(copy.deepcopy(d))
    kept = Cluster(scenario.nodes, scenario.running, scenario.tenants, scenario.vclusters,
                   scenario.session_types, use_vclusters=scenario.has_vclusters)
    states: dict[str, str] = {}
    preempted = 0
    for i in range(24):
        shape = dict(shapes[i % len(shapes)])
        exclusive = bool(shape.pop("exclusive", False))
        req = replace(scenario.pending, id=f"p{i}", per_node={k: float(v) for k, v in shape.items()},
                      exclusive=exclusive)
        got = decide(kept, scenario.policy, req, scenario.now)
        want = decide(_fresh(d, states), scenario.policy, req, scenario.now)
        assert got.to_dict() == want.to_dict(), f"decision {i} ({shape})"
        for v in got.victims:  # victims start leaving, as the pass marks them
            state = "checkpointing" if v.action == "checkpoint" else "terminating"
            kept.set_state(v.id, state)
            states[v.id] = state
        preempted += got.outcome == "preempt"
    assert preempted >= 8  # the sequence really changed the pool between decisions


def _bounds(cluster: Cluster, scenario, req) -> tuple[np.ndarray, np.ndarray]:
    policy, now = scenario.policy, scenario.now
    view = RequestView(cluster, req)
    judged = judge(cluster, view, policy, req, now, _gates(cluster, policy, req, now))
    ents = pool_entries(view, judged.eligible)
    potential, _ = potential_nodes(view, ents)
    return lower_bounds(view, ents, pool_mask(view.cluster, ents), potential, judged.cost,
                        (now, policy.checkpoint_timeout_minutes))


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 10**6), per_node=st.sampled_from([{"gpu": 8.0}, {"gpu": 4.0}, {"gpu": 6.0, "cpu": 8.0}]))
def test_bounds_patched_where_the_pool_changed_equal_fresh_ones(seed, per_node):
    """The per-node bounds kept from the previous decision and patched on the nodes whose pool
    changed are the very numbers a fresh snapshot computes."""
    d = _document(seed, 120)
    scenario = parse_scenario(copy.deepcopy(d))
    kept = Cluster(scenario.nodes, scenario.running, scenario.tenants, scenario.vclusters,
                   scenario.session_types, use_vclusters=scenario.has_vclusters)
    req = replace(scenario.pending, per_node=per_node)
    rnd = random.Random(seed)
    states: dict[str, str] = {}
    ids = sorted(a.id for a in scenario.running)
    for _ in range(12):
        got = _bounds(kept, scenario, req)
        want = _bounds(_fresh(d, states), scenario, req)
        np.testing.assert_array_equal(got[1], want[1])
        np.testing.assert_array_equal(got[0], want[0])
        for victim in rnd.sample(ids, 3):  # a few leave, anywhere, as between two decisions
            kept.set_state(victim, "terminating")
            states[victim] = "terminating"
