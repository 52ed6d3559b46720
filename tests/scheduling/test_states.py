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
