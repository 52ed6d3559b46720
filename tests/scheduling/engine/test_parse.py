"""Sections 2, 6 and 7: what a valid document is, and errors that name the field."""

from __future__ import annotations

import copy

import pytest

from scheduling.engine import InvalidDocument, parse_policy, parse_scenario

from .helpers import doc, node, run

VALID = doc({"kind": "class_cost"}, [node("n1"), node("n2")],
            [run("a", "n1", preemption_class=2, checkpoint="auto")], {"preemption_class": 5})


def _errors(mutate) -> list[tuple[str, str]]:
    d = copy.deepcopy(VALID)
    mutate(d)
    with pytest.raises(InvalidDocument) as info:
        parse_scenario(d)
    return info.value.errors


def _paths(mutate) -> set[str]:
    return {p for p, _ in _errors(mutate)}


def test_valid_document_parses():
    assert parse_scenario(copy.deepcopy(VALID)).pending.id == "p"


@pytest.mark.parametrize(
    ("mutate", "path"),
    [
        (lambda d: d["running"][0].update(preemption_class=11), "running[0].preemption_class"),
        (lambda d: d["running"][0].update(preemption_class=5.0), "running[0].preemption_class"),
        (lambda d: d["running"][0].update(preemption_class=True), "running[0].preemption_class"),
        (lambda d: d["pending"].update(priority=101), "pending.priority"),
        (lambda d: d["pending"].update(nodes=0), "pending.nodes"),
        (lambda d: d["running"][0].update(walltime_minutes=0), "running[0].walltime_minutes"),
        (lambda d: d["running"][0].update(checkpoint_minutes=-1), "running[0].checkpoint_minutes"),
        (lambda d: d["running"][0].update(checkpoint="sometimes"), "running[0].checkpoint"),
        (lambda d: d["running"][0].update(color="red"), "running[0].color"),
        (lambda d: d.update(extra=1), "extra"),
        (lambda d: d["policy"].update(max_victim=3), "policy.max_victim"),
        (lambda d: d["policy"].update(kind="lottery"), "policy.kind"),
        (lambda d: d["nodes"][0]["capacity"].update(gpu=-8), "nodes[0].capacity.gpu"),
        (lambda d: d["nodes"].append(node("n1")), "nodes[2].name"),
        (lambda d: d["running"].append(run("a", "n2")), "running[1].id"),
        (lambda d: d["running"][0].update(placement={"n9": {"gpu": 1}}), "running[0].placement.n9"),
        (lambda d: d["running"][0].update(vcluster="nope"), "running[0].vcluster"),
        (lambda d: d["pending"].update(session_type="nope", vcluster="hpc") or d.update(session_types=[]),
         "pending.session_type"),
        (lambda d: d["vclusters"][0].update(max_borrow_pct=1.5), "vclusters[0].max_borrow_pct"),
        (lambda d: d.update(now="yesterday"), "now"),
        (lambda d: d.pop("pending"), "pending"),
        (lambda d: d["pending"].update(held_nodes=["zz"]), "pending.held_nodes[0]"),
        (lambda d: d["pending"].update(id="a"), "pending.id"),
    ],
)
def test_invalid_document_names_the_field(mutate, path):
    assert path in _paths(mutate)


def test_every_error_is_reported_not_only_the_first():
    def two(d):
        d["running"][0]["preemption_class"] = 11
        d["pending"]["priority"] = -1
    assert {"running[0].preemption_class", "pending.priority"} <= _paths(two)


def test_omitted_sections_take_contract_defaults():
    d = copy.deepcopy(VALID)
    del d["vclusters"]
    s = parse_scenario(d)
    assert s.has_vclusters is False and s.running[0].vcluster is None
    assert s.policy.max_victims == 3 and s.policy.mode == "suspend"
    assert parse_policy({"kind": "priority"}).max_victims is None
    assert parse_policy({"kind": "class_cost", "max_victims": None}).max_victims is None


def test_times_without_offset_are_utc():
    d = copy.deepcopy(VALID)
    d["now"] = "2026-05-01T12:00:00"
    assert parse_scenario(d).now == parse_scenario(copy.deepcopy(VALID)).now


@pytest.mark.parametrize(
    ("policy", "field"),
    [
        ({"kind": "fair_share", "aggressive_threshold": 0.9, "preemption_threshold": 0.5}, "aggressive_threshold"),
        ({"kind": "priority", "victim_scope": "planet"}, "victim_scope"),
        ({"kind": "priority", "preemption_order": "random"}, "preemption_order"),
        ({"kind": "queue", "preempt_jobtypes": ["urgent"]}, "preempt_jobtypes[0]"),
        ({"kind": "queue", "preempt_for": "most_loaded"}, "preempt_for"),
        ({"kind": "rank", "mode": "pause"}, "mode"),
        ({"kind": "class_cost", "max_victims": -1}, "max_victims"),
        ({"kind": "class_cost", "checkpoint_timeout_minutes": "ten"}, "checkpoint_timeout_minutes"),
        ({"kind": "class_cost", "reclaim_rule": "never"}, "reclaim_rule"),
        ({"kind": "class_cost", "max_deferral_minutes": -1}, "max_deferral_minutes"),
        ({"kind": "priority", "max_deferral_minutes": 1441}, "max_deferral_minutes"),
        ({"kind": "fair_share", "tolerance": -0.1}, "tolerance"),
        ({"kind": "fair_share", "enable_aggressive": "yes"}, "enable_aggressive"),
        ({"kind": "class_cost", "surprise": 1}, "surprise"),
        ({}, "kind"),
    ],
)
def test_invalid_policy_per_kind_names_the_field(policy, field):
    with pytest.raises(InvalidDocument) as info:
        parse_policy(policy)
    assert field in {p for p, _ in info.value.errors}


@pytest.mark.parametrize(("policy", "field"), [
    # jsonb keeps 1e308 (and 1e19) as the integers they equal: no 64-bit integer holds them
    ({"kind": "fair_share", "tolerance": 1e308}, "tolerance"),
    ({"kind": "class_cost", "max_victims": 10**19}, "max_victims"),
    ({"kind": "queue", "max_preemptions_per_job": 2**63}, "max_preemptions_per_job"),
    # durations a date cannot be moved by: now plus one stopped every pass of the group
    ({"kind": "class_cost", "checkpoint_timeout_minutes": 1e15}, "checkpoint_timeout_minutes"),
    ({"kind": "priority", "min_runtime_minutes": 60 * 24 * 365 * 101}, "min_runtime_minutes"),
    ({"kind": "queue", "no_preempt_interval_minutes": 1e12}, "no_preempt_interval_minutes"),
    ({"kind": "fair_share", "preemptive_scheduling_backoff_s": 1e12}, "preemptive_scheduling_backoff_s"),
])
def test_numbers_past_what_is_stored_or_dated_are_refused(policy, field):
    with pytest.raises(InvalidDocument) as info:
        parse_policy(policy)
    assert field in {p for p, _ in info.value.errors}


def test_a_century_is_the_longest_duration():
    century = 100 * 365 * 24 * 60
    policy = parse_policy({"kind": "fair_share", "near_completion_minutes": century,
                           "aggressive_starvation_timeout_s": century * 60})
    assert (policy.near_completion_minutes, policy.aggressive_starvation_timeout_s) == (century, century * 60)


def test_resource_amounts_past_the_limit_are_refused():
    assert ("pending.per_node.gpu", "must be between -1000000000000000 and 1000000000000000") in _errors(
        lambda d: d["pending"].update(per_node={"gpu": 1e308}))
