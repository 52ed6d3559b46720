"""The allocation state machine: every allowed transition, and a refusal from every state."""

from __future__ import annotations

import pytest

from scheduling.actions.allocations import allocation_transition
from scheduling.errors import InvalidTransition
from scheduling.models import AllocationEvent
from scheduling.states import TRANSITIONS

pytestmark = pytest.mark.django_db

# The state table of docs/architecture.md, written out again here on purpose.
ALLOWED = [
    ("pending", "running"), ("pending", "cancelled"), ("pending", "failed"),
    ("running", "checkpointing"), ("running", "terminating"), ("running", "completed"),
    ("running", "failed"), ("running", "cancelled"),
    ("checkpointing", "suspended"), ("checkpointing", "terminating"), ("checkpointing", "completed"),
    ("checkpointing", "failed"),
    ("checkpointing", "cancelled"),
    ("terminating", "pending"), ("terminating", "preempted"), ("terminating", "completed"),
    ("terminating", "failed"),
    ("terminating", "cancelled"),  # added to the design's table: a cancel waits for the process to be gone
    ("suspended", "pending"), ("suspended", "cancelled"),
]
STATES = ["pending", "running", "checkpointing", "terminating", "suspended", "completed", "failed",
          "cancelled", "preempted"]


def test_table_in_code_matches_design():
    assert {(a, b) for a, targets in TRANSITIONS.items() for b in targets} == set(ALLOWED)


@pytest.mark.parametrize(("src", "dst"), ALLOWED)
def test_allowed_transition_is_applied_with_its_event(make_allocation, src, dst):
    alloc = make_allocation(state=src)
    allocation_transition(allocation=alloc, to=dst, reason="test")
    alloc.refresh_from_db()
    assert alloc.state == dst
    event = AllocationEvent.objects.get(allocation=alloc)
    assert (event.from_state, event.to_state, event.reason) == (src, dst, "test")


@pytest.mark.parametrize("src", STATES)
def test_refused_transition_raises_and_writes_nothing(make_allocation, src):
    # "pending" is reachable only from terminating/suspended; "suspended" only from checkpointing.
    dst = "suspended" if src != "checkpointing" else "running"
    alloc = make_allocation(state=src)
    with pytest.raises(InvalidTransition):
        allocation_transition(allocation=alloc, to=dst)
    alloc.refresh_from_db()
    assert alloc.state == src
    assert not AllocationEvent.objects.filter(allocation=alloc).exists()


def test_stale_caller_loses_the_race(make_allocation):
    alloc = make_allocation(state="running")
    stale = type(alloc).objects.get(pk=alloc.pk)
    allocation_transition(allocation=alloc, to="completed")
    with pytest.raises(InvalidTransition):
        allocation_transition(allocation=stale, to="checkpointing")
    assert AllocationEvent.objects.filter(allocation=alloc).count() == 1


def test_many_move_together_or_not_at_all(make_allocation):
    from scheduling.actions.allocations import allocations_transition

    a, b, c = (make_allocation(state="running") for _ in range(3))
    allocations_transition(ids=[a.pk, b.pk], from_state="running", to="checkpointing", reason="preempted")
    assert {x.state for x in type(a).objects.filter(pk__in=[a.pk, b.pk])} == {"checkpointing"}
    assert AllocationEvent.objects.filter(allocation__in=[a, b], to_state="checkpointing").count() == 2

    allocation_transition(allocation=c, to="completed")  # a report got there first
    d = make_allocation(state="running")
    with pytest.raises(InvalidTransition):
        allocations_transition(ids=[c.pk, d.pk], from_state="running", to="terminating")
    d.refresh_from_db()
    assert d.state == "running"
    assert not AllocationEvent.objects.filter(to_state="terminating").exists()


def test_preempting_several_victims_is_all_or_nothing(make_allocation):
    from scheduling.actions.preemption import allocations_preempt
    from scheduling.errors import Conflict

    a, b = make_allocation(state="running"), make_allocation(state="running")
    gone = make_allocation(state="completed")
    with pytest.raises(Conflict):
        allocations_preempt(victims=[(a.pk, "checkpoint"), (gone.pk, "terminate")], decision=None,
                            checkpoint_timeout_s=600)
    a.refresh_from_db()
    assert a.state == "running" and a.deadline_at is None
    allocations_preempt(victims=[(a.pk, "checkpoint"), (b.pk, "terminate")], decision=None,
                        checkpoint_timeout_s=600)
    a.refresh_from_db()
    b.refresh_from_db()
    assert (a.state, b.state) == ("checkpointing", "terminating")
    assert (a.deadline_at - a.checkpoint_started_at).total_seconds() == 600


def test_victims_of_several_decisions_are_asked_together_each_with_its_own(make_allocation, resource_group):
    from datetime import timedelta

    from django.utils import timezone

    from nodes.protocol import TERMINATE_GRACE_S
    from scheduling.actions.preemption import preempt_for
    from scheduling.errors import Conflict
    from scheduling.models import PreemptionDecision

    a, b, c = (make_allocation(state="running") for _ in range(3))
    t1 = timezone.now().replace(microsecond=0)
    t2 = t1 + timedelta(seconds=7)
    first, second = (PreemptionDecision.objects.create(resource_group=resource_group, decided_for=t, result="preempt")
                     for t in (t1, t2))
    with pytest.raises(Conflict):  # one victim cannot be chosen by two decisions
        preempt_for([(first, t1, [(a.pk, "checkpoint")]), (second, t2, [(a.pk, "terminate")])],
                    checkpoint_timeout_s=600)
    preempt_for([(first, t1, [(a.pk, "checkpoint"), (b.pk, "terminate")]), (second, t2, [(c.pk, "checkpoint")])],
                checkpoint_timeout_s=600)
    for alloc in (a, b, c):
        alloc.refresh_from_db()
    assert [(x.state, x.preempted_by_id, x.state_changed_at) for x in (a, b, c)] == [
        ("checkpointing", first.pk, t1), ("terminating", first.pk, t1), ("checkpointing", second.pk, t2)]
    assert (a.deadline_at, c.deadline_at) == (t1 + timedelta(seconds=600), t2 + timedelta(seconds=600))
    assert (a.checkpoint_started_at, c.checkpoint_started_at, b.checkpoint_started_at) == (t1, t2, None)
    assert b.deadline_at == t1 + timedelta(seconds=TERMINATE_GRACE_S + 5)
    assert dict(AllocationEvent.objects.filter(to_state__in=["checkpointing", "terminating"]).values_list(
        "allocation_id", "decision_id")) == {a.pk: first.pk, b.pk: first.pk, c.pk: second.pk}


def test_holds_for_several_preemptors_keep_placed_nodes_and_drop_stale_ones(make_allocation, two_nodes):
    from scheduling.actions.preemption import allocations_hold
    from scheduling.models import Placement

    n1, n2 = two_nodes
    p, q = make_allocation(state="pending"), make_allocation(state="pending")
    Placement.objects.create(allocation=p, node=n1, kind="held")
    Placement.objects.create(allocation=q, node=n1, kind="assigned")
    allocations_hold({p.pk: [n2.pk], q.pk: [n1.pk, n2.pk]})
    allocations_hold({p.pk: [n2.pk], q.pk: [n1.pk, n2.pk]})  # again: nothing changes
    held = sorted(Placement.objects.filter(kind="held").values_list("allocation_id", "node_id"))
    assert held == sorted([(p.pk, n2.pk), (q.pk, n2.pk)])
    assert Placement.objects.filter(allocation=q, node=n1, kind="assigned").exists()


def test_a_batch_starts_together_replacing_holds_and_skipping_a_cancelled_one(make_allocation, two_nodes):
    from django.utils import timezone

    from scheduling.actions.starts import allocations_start
    from scheduling.models import Allocation, Placement

    node_ids = {n.name: n.pk for n in two_nodes}
    first = make_allocation(state="pending", per_node_gpu=2, command=["train", "--epochs", "3"],
                            env={"SEED": "7"})
    held = make_allocation(state="pending", node_count=2, per_node_gpu=4)
    gone = make_allocation(state="cancelled", per_node_gpu=1)
    Placement.objects.create(allocation=held, node=two_nodes[0], kind="held")
    Placement.objects.create(allocation=held, node=two_nodes[1], kind="held")
    moment = timezone.now()

    started = allocations_start({first.pk: ["gpu-a"], held.pk: ["gpu-a", "gpu-b"], gone.pk: ["gpu-b"]},
                                node_ids, moment, had_holds=True)

    assert sorted(a.pk for a in started) == [first.pk, held.pk]
    back = {a.pk: a for a in started}[first.pk]
    assert (back.command, back.env, back.per_node_gpu) == (["train", "--epochs", "3"], {"SEED": "7"}, 2)
    assert sorted(Placement.objects.values_list("allocation_id", "node__name", "kind", "gpu")) == sorted([
        (first.pk, "gpu-a", "assigned", 2), (held.pk, "gpu-a", "assigned", 4), (held.pk, "gpu-b", "assigned", 4)])
    rows = {a.pk: a for a in Allocation.objects.filter(pk__in=[first.pk, held.pk, gone.pk])}
    assert [rows[pk].state for pk in (first.pk, held.pk, gone.pk)] == ["running", "running", "cancelled"]
    assert rows[held.pk].ran_on == ["gpu-a", "gpu-b"]
    assert rows[first.pk].started_at == moment
    assert sorted(AllocationEvent.objects.values_list("allocation_id", "from_state", "to_state", "reason")) == sorted([
        (first.pk, "pending", "running", "placed on gpu-a"), (held.pk, "pending", "running", "placed on gpu-a, gpu-b")])
