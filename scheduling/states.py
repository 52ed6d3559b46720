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
# several whose process there is gone (nodes/partial_exits.py); the event is marked ``node_freed``,
# and the accounting stops billing that node from it.
ONE_NODE_EXITED = "exited on "


class Leaving(models.TextChoices):
    """Why work that holds its nodes is leaving them (``Allocation.leaving``): what decides how it
    ends once its process is gone. Kept once it ended; cleared when it goes back to the queue.
    The words a tenant reads about a failure are ``Allocation.fail_reason``."""

    NONE = "", "Not leaving"
    # Asked to leave by a preemption (a decision, an operator's force-preempt, its node's health):
    # back to the queue, or ``preempted`` in terminate mode.
    PREEMPTED = "preempted", "Preempted"
    REQUEUE = "requeue", "Requeue asked"  # an operator's requeue: back to the queue whatever the mode
    CANCEL = "cancel", "Cancel asked"  # ends cancelled, or completed if it exits 0 first
    # Cancelled after one of its processes failed (RANK_FAILED): ends cancelled, never completed.
    RANK_FAILED_CANCEL = "rank_failed_cancel", "Cancel asked after a process failed"
    # The failures: each ends it failed, with its fail_reason.
    NODE_LOST = "node_lost", "A node lost"  # the one failure requeued under on_node_failure
    CHECKPOINT_FAILED = "checkpoint_failed", "Checkpoint failed or timed out"
    WALLTIME = "walltime", "Walltime exceeded"
    # Its process failed on one of its nodes (running or checkpointing): the work failed, so the
    # others' exit 0 does not make it completed, and its exit code is the failed process's.
    RANK_FAILED = "rank_failed", "A process failed on a node"
    # Asked to checkpoint, its run never started on one of its nodes: the processes that did start
    # cannot have gone past its last checkpoint (a rank was missing), so they are stopped and it is
    # requeued to resume as it would have.
    NOT_STARTED = "not_started", "Its run never started on a node"


CANCELLING = frozenset({Leaving.CANCEL, Leaving.RANK_FAILED_CANCEL})
FAILING = frozenset({Leaving.NODE_LOST, Leaving.CHECKPOINT_FAILED, Leaving.WALLTIME, Leaving.RANK_FAILED})
FAILED_ON_A_NODE = frozenset({Leaving.RANK_FAILED, Leaving.RANK_FAILED_CANCEL})


def allowed(from_state: str, to_state: str) -> bool:
    return to_state in TRANSITIONS.get(from_state, frozenset())
