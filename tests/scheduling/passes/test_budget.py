"""A tenant's GPU-hours from the allocation history, and the budget period."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from scheduling.models import AllocationEvent
from scheduling.passes.budget import budget_period, gpu_hours, tenant_gpu_hours

pytestmark = pytest.mark.django_db


def at(hour: float, day: int = 1, month: int = 5) -> datetime:
    return datetime(2026, month, day, int(hour), int(round(hour % 1 * 60)), tzinfo=UTC)


def _history(alloc, steps):
    """Events (from, to, when) with the times given, as the actions would have written them."""
    for from_state, to_state, when in steps:
        event = AllocationEvent.objects.create(allocation=alloc, from_state=from_state, to_state=to_state)
        AllocationEvent.objects.filter(pk=event.pk).update(created_at=when)


def test_budget_period_is_the_calendar_month_in_utc():
    assert budget_period(at(13, day=15)) == (at(0), at(0, month=6))
    december = datetime(2026, 12, 31, 23, 59, tzinfo=UTC)
    assert budget_period(december) == (datetime(2026, 12, 1, tzinfo=UTC), datetime(2027, 1, 1, tzinfo=UTC))


def test_gpu_hours_across_a_suspension_and_a_preemption(make_allocation, tenant_physics, tenant_chemistry):
    job = make_allocation(node_count=2, per_node_gpu=4, state="running", submitted_at=at(9))  # 8 GPUs
    _history(job, [
        ("", "pending", at(9)),
        ("pending", "running", at(10)),
        ("running", "checkpointing", at(12)),       # preempted: still holds its nodes while it checkpoints
        ("checkpointing", "suspended", at(12.5)),   # 10:00-12:30, 2.5 h
        ("suspended", "pending", at(13)),
        ("pending", "running", at(14)),
        ("running", "terminating", at(15)),
        ("terminating", "pending", at(15.25)),      # 14:00-15:15, 1.25 h
        ("pending", "running", at(16)),             # still running
    ])
    # Last month's run that ended just after midnight: 1 GPU from 23:00 to 01:00.
    old = make_allocation(per_node_gpu=1, state="completed", submitted_at=at(22, day=30, month=4),
                          ended_at=at(1))
    _history(old, [("pending", "running", at(23, day=30, month=4)), ("running", "completed", at(1))])
    cpu_only = make_allocation(per_node_gpu=0, state="running", submitted_at=at(9))
    _history(cpu_only, [("pending", "running", at(9))])
    other = make_allocation(tenant=tenant_chemistry, per_node_gpu=8, state="running", submitted_at=at(9))
    _history(other, [("pending", "running", at(9))])

    # Up to 17:00: 8 x (2.5 + 1.25 + 1) = 38, plus 1 GPU-hour of the old run in May.
    assert tenant_gpu_hours(tenant_physics.pk, at(0), at(17)) == pytest.approx(39.0)
    # From noon: 8 x (0.5 + 1.25 + 1) = 22.
    assert tenant_gpu_hours(tenant_physics.pk, at(12), at(17)) == pytest.approx(22.0)
    # Only last month's hour before May began.
    assert tenant_gpu_hours(tenant_physics.pk, at(0, month=4), at(0)) == pytest.approx(1.0)
    both = gpu_hours([tenant_physics.pk, tenant_chemistry.pk], at(0), at(17))
    assert both == {tenant_physics.pk: pytest.approx(39.0), tenant_chemistry.pk: pytest.approx(8 * 8.0)}
    assert gpu_hours([tenant_physics.pk], at(17), at(17)) == {tenant_physics.pk: 0.0}
