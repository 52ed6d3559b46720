"""The allocation state machine: every allowed transition, and a refusal from every state."""

from __future__ import annotations

import pytest

from scheduling.actions.allocations import allocation_transition
from scheduling.errors import InvalidTransition
from scheduling.models import AllocationEvent
from scheduling.states import TRANSITIONS

pytestmark = pytest.mark.django_db

# The table of DESIGN.md section 3, written out again here on purpose.
ALLOWED = [
    ("pending", "running"), ("pending", "cancelled"), ("pending", "failed"),
    ("running", "checkpointing"), ("running", "terminating"), ("running", "completed"),
    ("running", "failed"), ("running", "cancelled"),
    ("checkpointing", "suspended"), ("checkpointing", "failed"), ("checkpointing", "cancelled"),
    ("terminating", "pending"), ("terminating", "preempted"), ("terminating", "failed"),
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
