"""The LSF and Symphony rules beyond the queue and rank basics, each worked out by hand:
exclusive requests, the no-preempt interval, preempt_for mini_job / optimal_mini_job,
a session type's max_preemptions_per_job, and a request's own rank."""

from __future__ import annotations

import pytest

from scheduling.engine import InvalidDocument, parse_policy, parse_scenario

from .helpers import codes, decide, doc, node, run, victims

QUEUES = [
    {"name": "urgent", "priority": 90, "preemptive": True},
    {"name": "mid2", "priority": 30, "preemptable": True},
    {"name": "mid", "priority": 20, "preemptable": True},
    {"name": "low", "priority": 10, "preemptable": True},
]


# -- exclusive requests (PREEMPT_JOBTYPE=EXCLUSIVE) ---------------------------------

def test_exclusive_request_waits_unless_preempt_jobtypes_lists_exclusive():
    running = [run("a", "n1", session_type="low", gpu=2)]
    req = {"session_type": "urgent", "exclusive": True, "per_node": {"gpu": 4}}
    out = decide(doc({"kind": "queue"}, [node("n1")], running, req, session_types=QUEUES))
    assert (out["outcome"], out["code"], out["victims"]) == ("wait", "EXCLUSIVE_NOT_PREEMPTIVE", [])
    assert "exclusive" in out["explanation"]
    # a is still judged (it would be eligible): the wait is about the request, not about a
    assert codes(out) == {"a": "NOT_NEEDED"}
    out = decide(doc({"kind": "queue", "preempt_jobtypes": ["exclusive"]}, [node("n1")], running, req,
                     session_types=QUEUES))
    assert (out["code"], victims(out)) == ("PREEMPT", ["a"])
    # not exclusive: it needs 4 of the 6 free GPUs, so it fits
    req["exclusive"] = False
    assert decide(doc({"kind": "queue"}, [node("n1")], running, req, session_types=QUEUES))["code"] == "FITS"


def test_exclusive_request_gate_is_a_queue_rule_only():
    running = [run("a", "n1", gpu=2, preemption_class=1)]
    out = decide(doc({"kind": "class_cost"}, [node("n1")], running,
                     {"exclusive": True, "preemption_class": 5, "per_node": {"gpu": 4}}))
    assert victims(out) == ["a"]


# -- no_preempt_interval_minutes ------------------------------------------------------

def test_no_preempt_interval_protects_recently_started_or_resumed_work():
    policy = {"kind": "queue", "no_preempt_interval_minutes": 30}
    running = [run("young", "n1", session_type="low", started_at="2026-05-01T11:45:00Z"),  # 15 min
               run("edge", "n2", session_type="low", started_at="2026-05-01T11:30:00Z"),  # exactly 30
               run("old", "n3", session_type="mid", started_at="2026-05-01T10:00:00Z")]
    nodes = [node("n1"), node("n2"), node("n3")]
    out = decide(doc(policy, nodes, running, {"session_type": "urgent"}, session_types=QUEUES))
    assert codes(out)["young"] == "NO_PREEMPT_INTERVAL"
    assert codes(out)["edge"] == "SELECTED"  # "at least" is inclusive; low before mid
    # without the interval the youngest low job is simply eligible
    out = decide(doc({"kind": "queue"}, nodes, running, {"session_type": "urgent"}, session_types=QUEUES))
    assert "NO_PREEMPT_INTERVAL" not in codes(out).values()
    # it applies without a walltime, unlike no_preempt_run_minutes, and after QUEUE_NOT_LOWER
    running.append(run("peer", "n1", session_type="urgent", gpu=0.0, started_at="2026-05-01T11:59:00Z"))
    out = decide(doc(policy, nodes, running, {"session_type": "urgent"}, session_types=QUEUES))
    assert codes(out)["peer"] == "QUEUE_NOT_LOWER"


def test_no_preempt_interval_is_validated_by_path():
    with pytest.raises(InvalidDocument) as exc:
        parse_policy({"kind": "queue", "no_preempt_interval_minutes": -1})
    assert exc.value.errors[0][0] == "no_preempt_interval_minutes"


# -- preempt_for: mini_job and optimal_mini_job -------------------------------------

def test_mini_job_takes_the_largest_jobs_first_so_fewer_are_preempted():
    # n1 holds a (4) and b (2): load 0.75; n2 holds c (8): load 1.0. The request needs 8 on one node.
    running = [run("a", {"n1": 4}, session_type="low"), run("b", {"n1": 2}, session_type="low"),
               run("c", {"n2": 8}, session_type="low")]
    nodes = [node("n1"), node("n2")]
    req = {"session_type": "urgent"}
    out = decide(doc({"kind": "queue"}, nodes, running, req, session_types=QUEUES))
    assert victims(out) == ["a", "b"]  # least-loaded node first: two jobs
    out = decide(doc({"kind": "queue", "preempt_for": "mini_job"}, nodes, running, req, session_types=QUEUES))
    assert (victims(out), out["nodes"]) == (["c"], ["n2"])  # largest first: one job


def _optimal_case() -> tuple[list, list]:
    # P (low queue) holds 5 on n1 and 5 on n2; s (mid) 3 on n1; u (mid) 3 on n2; t (mid2) 8 on n3.
    running = [run("P", {"n1": 5, "n2": 5}, session_type="low"), run("s", {"n1": 3}, session_type="mid"),
               run("u", {"n2": 3}, session_type="mid"), run("t", {"n3": 8}, session_type="mid2")]
    return running, [node("n1"), node("n2"), node("n3")]


def test_optimal_mini_job_preempts_the_fewest_jobs():
    running, nodes = _optimal_case()
    req = {"session_type": "urgent"}
    # the walk goes lower queue first: P, then s frees n1 -> two victims
    out = decide(doc({"kind": "queue", "preempt_for": "mini_job"}, nodes, running, req, session_types=QUEUES))
    assert victims(out) == ["P", "s"]
    out = decide(doc({"kind": "queue", "preempt_for": "optimal_mini_job"}, nodes, running, req,
                     session_types=QUEUES))
    assert (victims(out), out["nodes"]) == (["t"], ["n3"])
    assert codes(out) == {"P": "NOT_NEEDED", "s": "NOT_NEEDED", "t": "SELECTED", "u": "NOT_NEEDED"}


def test_optimal_mini_job_finds_a_set_within_max_victims_the_walk_exceeds():
    running, nodes = _optimal_case()
    req = {"session_type": "urgent"}
    out = decide(doc({"kind": "queue", "preempt_for": "mini_job", "max_victims": 1}, nodes, running, req,
                     session_types=QUEUES))
    assert out["code"] == "EXCEEDS_MAX_VICTIMS"
    out = decide(doc({"kind": "queue", "preempt_for": "optimal_mini_job", "max_victims": 1}, nodes, running,
                     req, session_types=QUEUES))
    assert victims(out) == ["t"]
    # nothing of size 1 frees two whole nodes: the walk's answer (and its bound) stands
    out = decide(doc({"kind": "queue", "preempt_for": "optimal_mini_job", "max_victims": 1}, nodes, running,
                     {**req, "nodes": 2}, session_types=QUEUES))
    assert out["code"] == "EXCEEDS_MAX_VICTIMS"


def test_optimal_mini_job_ties_go_to_the_earliest_in_the_walk():
    # x and y each free n1 or n2 alone; x is in the lower queue, so it comes first in the walk
    running = [run("y", {"n1": 8}, session_type="mid"), run("x", {"n2": 8}, session_type="low")]
    out = decide(doc({"kind": "queue", "preempt_for": "optimal_mini_job"}, [node("n1"), node("n2")], running,
                     {"session_type": "urgent"}, session_types=QUEUES))
    assert victims(out) == ["x"]


# -- max_preemptions_per_job on the session type ------------------------------------

def test_session_type_max_preemptions_overrides_the_policy():
    types = [*QUEUES, {"name": "tough", "priority": 10, "preemptable": True, "max_preemptions_per_job": 3},
             {"name": "fragile", "priority": 10, "preemptable": True, "max_preemptions_per_job": 0}]
    running = [run("t2", "n1", session_type="tough", preempted_count=2),
               run("l2", "n2", session_type="low", preempted_count=2),
               run("l0", "n3", session_type="low", preempted_count=0),
               run("f0", "n4", session_type="fragile", preempted_count=0)]
    nodes = [node(f"n{i}") for i in range(1, 5)]
    out = decide(doc({"kind": "queue", "max_preemptions_per_job": 1}, nodes, running, {"session_type": "urgent"},
                     session_types=types))
    assert codes(out)["t2"] in ("SELECTED", "NOT_NEEDED")  # 2 < 3: the type's limit wins
    assert codes(out)["l2"] == "MAX_PREEMPTIONS"  # 2 >= the policy's 1
    assert codes(out)["l0"] in ("SELECTED", "NOT_NEEDED")
    assert codes(out)["f0"] == "MAX_PREEMPTIONS"  # the type's 0, although the policy allows one
    # without a policy limit, only the types' limits apply
    out = decide(doc({"kind": "queue"}, nodes, running, {"session_type": "urgent"}, session_types=types))
    assert codes(out)["l2"] != "MAX_PREEMPTIONS" and codes(out)["f0"] == "MAX_PREEMPTIONS"
    # a sensitive request ignores every MAX_PREEMPTIONS, the type's included
    out = decide(doc({"kind": "queue"}, nodes, running, {"session_type": "urgent", "preemption_class": 10},
                     session_types=types))
    assert codes(out)["f0"] != "MAX_PREEMPTIONS"


def test_session_type_max_preemptions_is_validated_by_path():
    d = doc({"kind": "queue"}, [node("n1")], [], {}, session_types=[{"name": "q", "max_preemptions_per_job": -1}])
    with pytest.raises(InvalidDocument) as exc:
        parse_scenario(d)
    assert exc.value.errors[0][0] == "session_types[0].max_preemptions_per_job"


# -- the request's own rank (Symphony) ------------------------------------------------

RANKED = [{"name": "svc", "rank": 5, "preemptive": True, "scope": "lower"}, {"name": "batch", "rank": 5}]
TENANTS = [{"name": "me", "fair_share": 0.5}, {"name": "them", "fair_share": 0.1}]


def test_rank_uses_the_requests_and_the_victims_own_rank():
    running = [run("plain", "n1", tenant="them", session_type="batch"),          # rank 5 (the type's)
               run("raised", "n2", tenant="them", session_type="batch", rank=9),  # its own rank 9
               run("lowered", "n3", tenant="them", session_type="batch", rank=2)]
    nodes = [node("n1"), node("n2"), node("n3")]
    req = {"tenant": "me", "session_type": "svc"}
    out = decide(doc({"kind": "rank"}, nodes, running, req, tenants=TENANTS, session_types=RANKED))
    # the request's rank is its type's 5, scope lower: only "lowered" (2) is below it
    assert codes(out) == {"lowered": "SELECTED", "plain": "RANK_NOT_LOWER", "raised": "RANK_NOT_LOWER"}
    out = decide(doc({"kind": "rank"}, nodes, running, {**req, "rank": 8}, tenants=TENANTS,
                     session_types=RANKED))
    # at rank 8 "plain" (5) is below too, and the walk takes the lowest rank first
    assert codes(out) == {"lowered": "SELECTED", "plain": "NOT_NEEDED", "raised": "RANK_NOT_LOWER"}
    running[2]["rank"] = 7
    out = decide(doc({"kind": "rank"}, nodes, running, {**req, "rank": 8}, tenants=TENANTS,
                     session_types=RANKED))
    assert codes(out) == {"lowered": "NOT_NEEDED", "plain": "SELECTED", "raised": "RANK_NOT_LOWER"}


def test_rank_field_is_validated_by_path():
    d = doc({"kind": "rank"}, [node("n1")], [], {"rank": 0})
    with pytest.raises(InvalidDocument) as exc:
        parse_scenario(d)
    assert exc.value.errors[0][0] == "pending.rank"
