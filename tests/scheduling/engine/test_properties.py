"""Properties of section 4.5 over generated clusters, for every policy kind."""

from __future__ import annotations

import copy
import json
import random

from hypothesis import given
from hypothesis import strategies as st

from scheduling.engine import decide_scenario, parse_scenario

from . import oracle

KINDS = ["class_cost", "priority", "queue", "rank", "fair_share"]
TENANTS = ["t1", "t2", "t3"]
QUEUES = ["q0", "q1", "q2"]
TIMES = ["2026-05-01T08:00:00Z", "2026-05-01T10:00:00Z", "2026-05-01T11:30:00Z", "2026-05-01T11:58:00Z",
         "2026-05-01T12:00:00Z"]


@st.composite
def documents(draw, kind: str) -> dict:
    """Densely packed clusters where contests are common: most requests must preempt or wait."""
    n_nodes = draw(st.integers(1, 5))
    nodes = []
    for i in range(n_nodes):
        nodes.append({"name": f"n{i}", "capacity": {"gpu": draw(st.sampled_from([4, 8])), "cpu": 32},
                      "state": draw(st.sampled_from(["ready"] * 9 + ["down"]))})
    free = {n["name"]: n["capacity"]["gpu"] for n in nodes}
    running = []
    names = [n["name"] for n in nodes]
    plan = draw(st.integers(0, 12))
    for j in range(plan + len(names)):
        if j >= plan:  # then mostly fill what is left, so that free capacity is rare
            name = names[j - plan]
            if free[name] <= 0 or draw(st.integers(0, 3)) == 0:
                continue
        gang = j < plan and draw(st.integers(0, 4)) == 0 and len(names) > 1
        if j >= plan:
            span, gpu = [names[j - plan]], free[names[j - plan]]
        else:
            span = draw(st.lists(st.sampled_from(names), min_size=2 if gang else 1,
                                 max_size=2 if gang else 1, unique=True))
            gpu = draw(st.sampled_from([1, 2, 2, 4, 4, 8, 0]))  # 0: CPU-only work, useless to GPU requests
        cpu_only = gpu == 0
        gpu = min([gpu] + [free[name] for name in span])
        if gpu <= 0 and not cpu_only:
            continue
        for name in span:
            free[name] -= gpu
        alloc = {
            "id": f"a{j:02d}", "placement": {name: {"gpu": gpu, "cpu": 4} for name in span},
            "tenant": draw(st.sampled_from(["t2", "t2", "t3", "t1"])),
            "session_type": draw(st.sampled_from(["q0", "q0", "q1", "q2"])),
            "preemption_class": draw(st.sampled_from([0, 1, 2, 3, 4, 5, 6, 8, 10])),
            "priority": draw(st.integers(0, 60)),
            "checkpoint": draw(st.sampled_from(["auto", "manual", "none"])),
            "checkpoint_minutes": draw(st.sampled_from([5, 5, 5, 12])),
            "started_at": draw(st.sampled_from(TIMES)),
            "walltime_minutes": draw(st.sampled_from([None, None, None, 300, 1000])),
            "state": draw(st.sampled_from(["running"] * 9 + ["checkpointing"])),
        }
        if draw(st.integers(0, 14)) == 0:
            alloc["protected_until"] = "2026-05-01T13:00:00Z"
        running.append(alloc)
    pending = {
        "id": "p", "nodes": draw(st.sampled_from([1, 1, 2])), "per_node": {"gpu": draw(st.sampled_from([2, 4, 8]))},
        "tenant": "t1", "session_type": draw(st.sampled_from(["q2", "q2", "q1", "q0"])),
        "preemption_class": draw(st.sampled_from([3, 5, 7, 9, 9, 10])), "priority": draw(st.integers(20, 100)),
        "exclusive": draw(st.integers(0, 9)) == 0,
    }
    if kind == "class_cost" and draw(st.booleans()):
        pending["value"] = draw(st.sampled_from([5, 20, 200, 2000]))
    policy: dict = {"kind": kind}
    if draw(st.booleans()):
        policy["max_victims"] = draw(st.sampled_from([None, 1, 2, 3]))
    if kind == "priority":
        policy["preemption_order"] = draw(st.sampled_from(["newest", "oldest"]))
    if kind == "fair_share":
        policy["enable_aggressive"] = draw(st.booleans())
    tenants = [{"name": "t1", "fair_share": draw(st.sampled_from([0.3, 0.6, 0.9])), "burst_allowance": None,
                "below_fair_share_since": draw(st.sampled_from([None, "2026-05-01T11:00:00Z",
                                                                "2026-05-01T11:00:00Z"]))}]
    tenants += [{"name": t, "fair_share": draw(st.sampled_from([0.0, 0.05, 0.1, 0.3])),
                 "burst_allowance": draw(st.sampled_from([None, 1.5])), "below_fair_share_since": None}
                for t in ("t2", "t3")]
    session_types = [{"name": q, "priority": 10 * i, "preemptive": draw(st.sampled_from([True, True, False])),
                      "preemptable": draw(st.booleans()), "rank": 1 + 10 * i,
                      "scope": draw(st.sampled_from(["lower", "lower_or_equal"]))}
                     for i, q in enumerate(QUEUES)]
    return {"now": "2026-05-01T12:00:00Z", "policy": policy, "nodes": nodes, "running": running,
            "pending": pending, "tenants": tenants, "session_types": session_types}


def _decide(d: dict) -> dict:
    return decide_scenario(parse_scenario(copy.deepcopy(d))).to_dict()


def _check_properties(d: dict) -> None:
    out = _decide(d)
    victims = {v["id"] for v in out["victims"]}
    req = d["pending"]
    k = req["nodes"]
    by_id = {a["id"]: a for a in d["running"]}
    verdicts = {c["id"]: c["verdict"] for c in out["candidates"]}

    # every running allocation is a candidate exactly once, sorted by id
    assert [c["id"] for c in out["candidates"]] == sorted(by_id)
    assert {i for i, v in verdicts.items() if v == "victim"} == victims

    # last resort: never preempts when the request already fits
    if oracle.fits(d, set()):
        assert out["outcome"] == "fits" and not victims
    if out["outcome"] == "fits":
        assert oracle.fits(d, set())
    if out["outcome"] in ("fits", "preempt"):
        # feasible on the reported nodes, with every victim's gang gone whole
        assert len(out["nodes"]) == k == len(set(out["nodes"]))
        assert all(oracle.node_fits(d, name, victims) for name in out["nodes"])
    if out["outcome"] == "preempt":
        assert victims
        # minimal: no victim can be left running with the request still fitting
        for v in victims:
            assert not oracle.fits(d, victims - {v}), f"{v} was not needed"
        # bounded
        sensitive = req.get("sensitive") or req["preemption_class"] == 10
        bound = d["policy"].get("max_victims", 3 if d["policy"]["kind"] == "class_cost" else None)
        if bound is not None and not sensitive:
            assert len(victims) <= bound
        # only eligible: running, unprotected, and the kind's basic rule
        for v in victims:
            a = by_id[v]
            assert a.get("state", "running") == "running"
            assert a["preemption_class"] != 10 and "protected_until" not in a
            kind = d["policy"]["kind"]
            if kind == "class_cost":
                assert a["preemption_class"] < req["preemption_class"]
            if kind == "priority":
                assert a["priority"] < req["priority"]
            if kind == "fair_share":
                assert a["tenant"] != req["tenant"]
    else:
        assert not victims

    # deterministic, and independent of list order
    assert json.dumps(_decide(d), sort_keys=True) == json.dumps(out, sort_keys=True)
    shuffled = copy.deepcopy(d)
    rnd = random.Random(7)
    for key in ("nodes", "running", "tenants", "session_types"):
        rnd.shuffle(shuffled[key])
    assert json.dumps(_decide(shuffled), sort_keys=True) == json.dumps(out, sort_keys=True)


@given(documents("class_cost"))
def test_properties_class_cost(d):
    _check_properties(d)


@given(documents("priority"))
def test_properties_priority(d):
    _check_properties(d)


@given(documents("queue"))
def test_properties_queue(d):
    _check_properties(d)


@given(documents("rank"))
def test_properties_rank(d):
    _check_properties(d)


@given(documents("fair_share"))
def test_properties_fair_share(d):
    _check_properties(d)


@given(documents("class_cost"))
def test_class_cost_equals_brute_force_over_all_subsets(d):
    # Generated documents have no tenants' burst (halving), so drop them for the oracle.
    d = copy.deepcopy(d)
    d.pop("tenants")
    for a in d["running"]:
        a.pop("tenant")
    out = _decide(d)
    best = oracle.best_class_cost_set(d)
    if oracle.fits(d, set()):
        assert out["outcome"] == "fits"
        return
    if best is None:
        assert out["outcome"] == "wait"
        return
    assert out["outcome"] == "preempt", out
    total = sum(oracle.cost(d, next(a for a in d["running"] if a["id"] == v["id"])) for v in out["victims"])
    assert total == __import__("pytest").approx(best[0], abs=1e-5)
    assert len(out["victims"]) == best[1]
    assert sorted(v["id"] for v in out["victims"]) == best[2]
