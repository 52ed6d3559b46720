"""Section 4.2 protections, in their order, and the sensitive emergency claim."""

from __future__ import annotations

from unittest import mock

import numpy as np
import pytest

from scheduling.engine import eligibility

from .helpers import codes, decide, doc, node, run, victims

CLASS = {"kind": "class_cost"}


def _code_of(alloc: dict, policy: dict | None = None, pending: dict | None = None, **extra) -> str:
    d = doc(policy or CLASS, [node("n1")], [alloc], pending or {"preemption_class": 9}, **extra)
    return codes(decide(d))[alloc["id"]]


@pytest.mark.parametrize(
    ("fields", "code"),
    [
        ({"state": "checkpointing", "sensitive": True}, "NOT_RUNNING"),
        ({"sensitive": True, "protected_until": "2026-05-01T13:00:00Z"}, "SENSITIVE"),
        ({"preemption_class": 10}, "SENSITIVE"),
        ({"protected_until": "2026-05-01T12:00:01Z", "preemptible": False}, "PROTECTED"),
        ({"protected_until": "2026-05-01T12:00:00Z"}, "SELECTED"),  # strict: not after now
        ({"preemptible": False, "walltime_minutes": 61}, "NOT_PREEMPTIBLE"),
        ({"walltime_minutes": 65}, "NEAR_COMPLETION"),  # ends exactly 5 minutes from now
        ({"walltime_minutes": 65.1}, "SELECTED"),
        ({"checkpoint": "none", "preemption_class": 7, "started_at": "2026-05-01T11:59:00Z"},
         "NO_CHECKPOINT_HIGH_CLASS"),
    ],
)
def test_protection_code_when_field_set(fields, code):
    alloc = run("a", "n1", **{"preemption_class": 1, "checkpoint": "auto", **fields})
    assert _code_of(alloc) == code


def test_min_runtime_is_strict_and_max_preemptions_inclusive():
    policy = {"kind": "class_cost", "min_runtime_minutes": 60, "max_preemptions_per_job": 2}
    young = run("a", "n1", preemption_class=1, checkpoint="auto", started_at="2026-05-01T11:00:01Z")
    exactly = run("a", "n1", preemption_class=1, checkpoint="auto", started_at="2026-05-01T11:00:00Z")
    twice = run("a", "n1", preemption_class=1, checkpoint="auto", preempted_count=2)
    once = run("a", "n1", preemption_class=1, checkpoint="auto", preempted_count=1)
    assert _code_of(young, policy) == "MIN_RUNTIME"
    assert _code_of(exactly, policy) == "SELECTED"
    assert _code_of(twice, policy) == "MAX_PREEMPTIONS"
    assert _code_of(once, policy) == "SELECTED"


def test_sensitive_vcluster_allocations_are_never_victims():
    vcs = [{"name": "hpc"}, {"name": "sec", "type": "sensitive"}]
    alloc = run("a", "n1", vcluster="sec", preemption_class=0, checkpoint="auto")
    assert _code_of(alloc, vclusters=vcs) == "SENSITIVE"


def test_service_on_home_node_protected_but_reclaimable_when_borrowed():
    vcs = [{"name": "hpc"}, {"name": "svc", "type": "service"}]
    home = run("a", "s1", vcluster="svc", preemption_class=0, checkpoint="auto")
    d = doc({"kind": "class_cost", "reclaim_rule": "lower"}, [node("n1"), node("s1", vc="svc")],
            [run("h", "n1", preemption_class=9, checkpoint="auto"), home], {"preemption_class": 5}, vclusters=vcs)
    assert codes(decide(d))["a"] == "SERVICE_HOME"


def test_sensitive_request_ignores_anti_thrash_limits_but_not_protection():
    policy = {"kind": "class_cost", "min_runtime_minutes": 120, "max_victims": 1}
    running = [
        run("a", {"n1": 4}, preemption_class=8, checkpoint="none"),
        run("b", {"n1": 4}, preemption_class=1, checkpoint="auto", walltime_minutes=61),
        run("c", "n2", preemption_class=1, checkpoint="auto", protected_until="2026-05-02T00:00:00Z"),
    ]
    out = decide(doc(policy, [node("n1"), node("n2")], running, {"sensitive": True, "preemption_class": 9,
                                                                 "value": 0}))
    assert (out["outcome"], victims(out), out["trigger"]) == ("preempt", ["a", "b"], "sensitive")
    assert {v["reason"] for v in out["victims"]} == {"sensitive"}
    assert codes(out)["c"] == "PROTECTED"


def test_victim_action_follows_mode_and_checkpoint():
    running = [run("a", {"n1": 4}, preemption_class=1, checkpoint="auto"),
               run("b", {"n1": 4}, preemption_class=1, checkpoint="none", started_at="2026-05-01T12:00:00Z")]
    for mode, actions in (("suspend", {"a": "checkpoint", "b": "terminate"}),
                          ("requeue", {"a": "terminate", "b": "terminate"}),
                          ("terminate", {"a": "terminate", "b": "terminate"})):
        out = decide(doc({"kind": "class_cost", "mode": mode}, [node("n1")], running, {"preemption_class": 5}))
        assert {v["id"]: v["action"] for v in out["victims"]} == actions


def test_a_session_types_mode_decides_its_victims_action_in_the_engine():
    """The override is an input of the decision: the victim's action follows its session type's
    mode, the victim says which mode, and the explanation says what changed without naming it."""
    running = [run("a", {"n1": 4}, preemption_class=1, checkpoint="auto", session_type="batch"),
               run("b", {"n1": 4}, preemption_class=1, checkpoint="auto", session_type="train")]
    out = decide(doc({"kind": "class_cost", "mode": "suspend"}, [node("n1")], running, {"preemption_class": 5},
                     session_types=[{"name": "batch", "mode": "terminate"}, {"name": "train"}]))
    by_id = {v["id"]: v for v in out["victims"]}
    assert (by_id["a"]["action"], by_id["a"]["mode"]) == ("terminate", "terminate")
    assert by_id["b"]["action"] == "checkpoint" and "mode" not in by_id["b"]
    assert out["explanation"].endswith("By their session types' mode, 1 of them will instead be stopped for good.")
    assert "will be checkpointed and requeued" in out["explanation"]


def test_a_session_types_mode_must_be_a_known_mode():
    from scheduling.engine import InvalidDocument, parse_scenario

    with pytest.raises(InvalidDocument) as caught:
        parse_scenario(doc({"kind": "class_cost"}, [node("n1")], [], {},
                           session_types=[{"name": "batch", "mode": "pause"}]))
    assert [path for path, _ in caught.value.errors] == ["session_types[0].mode"]


@pytest.mark.parametrize("seed", range(20))
def test_both_ways_of_writing_the_first_rule_give_the_same_codes(seed: int) -> None:
    rnd = np.random.default_rng(seed)
    n = int(rnd.integers(0, 50))
    alive = rnd.random(n) < 0.8
    names = ["SENSITIVE", "PROTECTED", "NOT_PREEMPTIBLE", "SERVICE_HOME", "NEAR_COMPLETION", "MIN_RUNTIME"]
    rules = [(rnd.random(n) < 0.3, name) for name in names]
    small = eligibility._first_rule(alive, rules)
    with mock.patch.object(eligibility, "SMALL_SNAPSHOT", -1):
        large = eligibility._first_rule(alive, rules)
    expected = [-1 if not alive[i] else next((eligibility.CODE[name] for mask, name in rules if mask[i]), 0)
                for i in range(n)]
    assert small.tolist() == expected
    assert large.tolist() == expected
