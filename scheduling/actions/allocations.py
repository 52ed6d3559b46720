"""State changes of allocations: the one place the state machine is enforced."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from scheduling.errors import InvalidTransition
from scheduling.models import Allocation, AllocationEvent, PreemptionDecision
from scheduling.states import allowed


def allocation_transition(
    *,
    allocation: Allocation,
    to: str,
    reason: str = "",
    actor: AbstractBaseUser | None = None,
    decision: PreemptionDecision | None = None,
    now: datetime | None = None,
    fields: dict[str, Any] | None = None,
) -> Allocation:
    """Move ``allocation`` to ``to`` if the table allows it, and write its event.

    The update is conditional on the state the caller saw (``UPDATE ... WHERE
    state = from``), so two racing callers cannot both apply a transition: the
    loser gets InvalidTransition and nothing is written.
    """
    from_state = allocation.state
    if not allowed(from_state, to):
        raise InvalidTransition(
            f"allocation {allocation.pk} cannot go from {from_state} to {to}",
            from_state=from_state, to_state=to,
        )
    moment = now or timezone.now()
    changes: dict[str, Any] = {"state": to, "state_changed_at": moment, **(fields or {})}
    with transaction.atomic():
        updated = Allocation.objects.filter(pk=allocation.pk, state=from_state).update(**changes)
        if updated != 1:
            current = Allocation.objects.filter(pk=allocation.pk).values_list("state", flat=True).first()
            raise InvalidTransition(
                f"allocation {allocation.pk} is {current}, not {from_state}",
                from_state=current, to_state=to,
            )
        AllocationEvent.objects.create(
            allocation=allocation, from_state=from_state, to_state=to, reason=reason[:255],
            decision=decision, actor=actor if actor is not None and actor.is_authenticated else None,
        )
    for key, value in changes.items():
        setattr(allocation, key, value)
    return allocation


def allocations_transition(
    *,
    ids: list[int],
    from_state: str,
    to: str,
    reason: str = "",
    decision: PreemptionDecision | None = None,
    now: datetime | None = None,
    fields: dict[str, Any] | None = None,
) -> None:
    """``allocation_transition`` for many allocations in the same state, in two statements.

    All move or none: if any of them is no longer in ``from_state`` (a racing report, a
    cancel), InvalidTransition is raised and the transaction writes nothing.
    """
    if not allowed(from_state, to):
        raise InvalidTransition(f"allocations cannot go from {from_state} to {to}", from_state=from_state,
                                to_state=to)
    moment = now or timezone.now()
    wanted = set(ids)
    with transaction.atomic():
        updated = Allocation.objects.filter(pk__in=wanted, state=from_state).update(
            state=to, state_changed_at=moment, **(fields or {}))
        if updated != len(wanted):
            raise InvalidTransition(f"{len(wanted) - updated} of {len(wanted)} allocations are no longer "
                                    f"{from_state}", from_state=from_state, to_state=to)
        AllocationEvent.objects.bulk_create([
            AllocationEvent(allocation_id=pk, from_state=from_state, to_state=to, reason=reason[:255],
                            decision=decision) for pk in sorted(wanted)])
