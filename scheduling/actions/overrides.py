"""Operator overrides: protect, force-preempt, pause and resume. Each is audited with a reason."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from scheduling.actions.lifecycle import mode_of
from scheduling.actions.policies import policy_change_record, snapshot
from scheduling.actions.preemption import allocation_preempt
from scheduling.dispatch import event_on_commit
from scheduling.engine.model import victim_action
from scheduling.errors import Conflict
from scheduling.models import Allocation, ResourceGroup
from scheduling.passes.snapshot import policy_of
from scheduling.states import FINAL, State


def protect_until_problem(until: datetime) -> str | None:
    """Why ``until`` cannot end a protection, or None: it must be a time still to come that the
    database can store (near year 1 or 9999 an offset can carry it out of range in UTC);
    protecting until a time past changes nothing. The API's and the console's field check."""
    try:
        until.astimezone(UTC)
    except OverflowError:
        return "out of range"
    return "must be in the future" if until <= timezone.now() else None


def allocation_protect(*, allocation: Allocation, until: datetime, actor: Any, reason: str) -> Allocation:
    """Keep work from being chosen as a victim until ``until``: running work, or work that will
    run (pending, suspended). Ended work has nothing left to protect (Conflict)."""
    with transaction.atomic():
        alloc = Allocation.objects.select_for_update().get(pk=allocation.pk)
        if alloc.state in FINAL:
            raise Conflict(f"allocation {alloc.pk} is {alloc.state}: ended work cannot be protected")
        before = {"protected_until": alloc.protected_until.isoformat() if alloc.protected_until else None}
        alloc.protected_until = until
        alloc.save(update_fields=["protected_until"])
        policy_change_record(actor=actor, action="protect", target=alloc, before=before,
                             after={"protected_until": until.isoformat()}, reason=reason)
        event_on_commit("override", {"action": "protect", "allocation": alloc.pk}, alloc.tenant_id)
    return alloc


def allocation_force_preempt(*, allocation: Allocation, actor: Any, reason: str) -> Allocation:
    """Ask running work to leave now, as a preemption would (checkpoint when it can)."""
    alloc = Allocation.objects.select_related("resource_group", "session_type").get(pk=allocation.pk)
    if alloc.state != State.RUNNING:
        raise Conflict(f"allocation {alloc.pk} is {alloc.state}, not running")
    policy = policy_of(alloc.resource_group)
    action = victim_action(mode_of(alloc), alloc.checkpoint)
    with transaction.atomic():
        allocation_preempt(allocation=alloc, decision=None, action=action,
                           checkpoint_timeout_s=policy.checkpoint_timeout_minutes * 60)
        policy_change_record(actor=actor, action="force_preempt", target=alloc, before={"state": State.RUNNING},
                             after={"state": "leaving", "action": action}, reason=reason)
    return alloc


def group_pause(*, group: ResourceGroup, paused: bool, actor: Any, reason: str) -> ResourceGroup:
    with transaction.atomic():
        fresh = ResourceGroup.objects.select_for_update().get(pk=group.pk)
        before = snapshot(fresh)
        fresh.paused = paused
        fresh.save(update_fields=["paused", "updated_at"])
        policy_change_record(actor=actor, action="pause" if paused else "resume", target=fresh, before=before,
                             after=snapshot(fresh), reason=reason)
        event_on_commit("override", {"action": "pause" if paused else "resume", "group": fresh.name}, None)
    return fresh


def group_policy_edit(*, group: ResourceGroup, policy: dict[str, Any], actor: Any, reason: str) -> ResourceGroup:
    with transaction.atomic():
        fresh = ResourceGroup.objects.select_for_update().get(pk=group.pk)
        before = snapshot(fresh)
        fresh.policy = policy
        fresh.save(update_fields=["policy", "updated_at"])
        policy_change_record(actor=actor, action="edit", target=fresh, before=before, after=snapshot(fresh),
                             reason=reason)
        event_on_commit("policy", {"group": fresh.name, "at": timezone.now().isoformat()}, None)
    return fresh
