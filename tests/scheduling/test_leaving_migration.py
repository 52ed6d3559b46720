"""Migrations 0025 to 0027: ``Allocation.leaving`` and ``AllocationEvent.node_freed`` are filled
from what they replace (two booleans, the words of ``fail_reason`` and of the events), and the
booleans are given back when they are undone."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.db.migrations.loader import MigrationLoader

from scheduling.models import Allocation, AllocationEvent

BEFORE = [("scheduling", "0024_cancel_keeps_nodes_until_gone")]
# Forward again to the latest (not 0027 alone): the models read the rows afterwards, and later
# migrations add columns they select.
AFTER = MigrationLoader(None).graph.leaf_nodes("scheduling")

# (what leaving must say, the state, the columns as the code before wrote them)
ROWS: list[tuple[str, str, dict[str, Any]]] = [
    ("cancel", "terminating", {"cancel_asked": True}),
    ("cancel", "completed", {"cancel_asked": True, "fail_reason": "walltime exceeded (60 min)"}),
    ("rank_failed_cancel", "terminating", {"cancel_asked": True, "fail_reason": "exited on gpu-a: failed (1)"}),
    ("requeue", "terminating", {"requeue_asked": True}),
    ("preempted", "terminating", {}),
    ("preempted", "checkpointing", {}),
    ("node_lost", "terminating", {"requeue_asked": True, "fail_reason": "node gpu-b is down"}),
    ("node_lost", "failed", {"fail_reason": "not running on gpu-b after reconnect"}),
    ("checkpoint_failed", "terminating", {"fail_reason": "checkpoint timed out"}),
    ("checkpoint_failed", "failed", {"fail_reason": "checkpoint failed: no space left"}),
    ("walltime", "failed", {"fail_reason": "walltime exceeded (60 min)"}),
    ("rank_failed", "terminating", {"fail_reason": "exited on gpu-a: failed (1)"}),
    ("rank_failed", "failed", {"fail_reason": "checkpoint failed: exited on gpu-a: failed (1)"}),
    ("", "running", {}),
    ("", "preempted", {}),
]


def _migrate(targets: list[tuple[str, str]]) -> Any:
    executor = MigrationExecutor(connection)
    executor.migrate(targets)
    return MigrationExecutor(connection).loader.project_state(targets).apps


@contextmanager
def _before() -> Iterator[Any]:
    """The schema before 0025 (its models), and the current one again after, whatever happens."""
    try:
        yield _migrate(BEFORE)
    finally:
        _migrate(AFTER)


@pytest.mark.django_db(transaction=True)
def test_leaving_and_node_freed_are_filled_from_what_they_replace_and_undone(make_allocation):
    made = [make_allocation(state=state) for _, state, _ in ROWS]
    wide = made[0]
    reasons = {"exited on gpu-b: completed (0); 1 more node(s) still running": ("running", True),
               "exited on gpu-a: failed (1): stopping": ("terminating", False),  # a change of state
               "Exited on gpu-c, in a cancel's own words": ("terminating", False)}
    for reason, (to_state, _) in reasons.items():
        AllocationEvent.objects.create(allocation=wide, from_state="running", to_state=to_state, reason=reason)
    with _before() as old:
        for alloc, (_, _, columns) in zip(made, ROWS, strict=True):
            old.get_model("scheduling", "Allocation").objects.filter(pk=alloc.pk).update(**columns)
    assert [Allocation.objects.get(pk=a.pk).leaving for a in made] == [kind for kind, _, _ in ROWS]
    assert dict(AllocationEvent.objects.filter(allocation=wide, reason__in=reasons)
                .values_list("reason", "node_freed")) == {r: freed for r, (_, freed) in reasons.items()}

    with _before() as old:
        flags = old.get_model("scheduling", "Allocation").objects.in_bulk([a.pk for a in made])
        assert [(flags[a.pk].cancel_asked, flags[a.pk].requeue_asked) for a in made] == [
            (kind in ("cancel", "rank_failed_cancel"), kind == "requeue") for kind, _, _ in ROWS]
        assert [flags[a.pk].fail_reason for a in made] == [c.get("fail_reason", "") for _, _, c in ROWS]
