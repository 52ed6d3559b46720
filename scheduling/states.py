"""The allocation state machine (docs/architecture.md), in one place."""

from __future__ import annotations

from django.db import models


class State(models.TextChoices):
    PENDING = "pending", "Pending"
    RUNNING = "running", "Running"
    CHECKPOINTING = "checkpointing", "Checkpointing"
    TERMINATING = "terminating", "Terminating"
    SUSPENDED = "suspended", "Suspended"
    COMPLETED = "completed", "Completed"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"
    PREEMPTED = "preempted", "Preempted"


TRANSITIONS: dict[str, frozenset[str]] = {
    State.PENDING: frozenset({State.RUNNING, State.CANCELLED, State.FAILED}),
    State.RUNNING: frozenset({State.CHECKPOINTING, State.TERMINATING, State.COMPLETED, State.FAILED,
                              State.CANCELLED}),
    State.CHECKPOINTING: frozenset({State.SUSPENDED, State.TERMINATING, State.COMPLETED, State.FAILED,
                                   State.CANCELLED}),
    State.TERMINATING: frozenset({State.PENDING, State.PREEMPTED, State.COMPLETED, State.FAILED,
                                 State.CANCELLED}),
    State.SUSPENDED: frozenset({State.PENDING, State.CANCELLED}),
    State.COMPLETED: frozenset(),
    State.FAILED: frozenset(),
    State.CANCELLED: frozenset(),
    State.PREEMPTED: frozenset(),
}

FINAL = frozenset(s for s, targets in TRANSITIONS.items() if not targets)
# States that hold capacity on nodes.
HOLDING = frozenset({State.RUNNING, State.CHECKPOINTING, State.TERMINATING})
# The start of the reason of the event (in the same holding state) that frees one node of work of
# several whose process there is gone (nodes/partial_exits.py); the accounting stops billing that node.
ONE_NODE_EXITED = "exited on "


def allowed(from_state: str, to_state: str) -> bool:
    return to_state in TRANSITIONS.get(from_state, frozenset())
