"""State changes of allocations: the one place the state machine is enforced."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import connection, transaction
from django.db.models import Case, Value, When
from django.utils import timezone

from scheduling.errors import InvalidTransition
from scheduling.models import Allocation, AllocationEvent, PreemptionDecision
from scheduling.models.allocations import DependencyStatus
from scheduling.pass_asks import request_pass_on_commit
from scheduling.passes.bulk import array_type, column, execute, insert_rows, stored
from scheduling.states import FINAL, State, allowed


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
        if to in FINAL:
            dependents_wake(allocation)
    for key, value in changes.items():
        setattr(allocation, key, value)
    return allocation


def dependents_wake(allocation: Allocation) -> None:
    """An allocation ended: the groups where its tenant has work waiting on a dependency get a pass
    after commit, which settles those dependencies (actions/dependencies.py). Dependencies are
    within one tenant, so only its waiting work is looked at (one indexed query)."""
    tenant_id = allocation.tenant_id
    if tenant_id is None:
        tenant_id = Allocation.objects.filter(pk=allocation.pk).values_list("tenant_id", flat=True).first()
    groups = set(Allocation.objects.filter(tenant_id=tenant_id, state=State.PENDING,
                                           dependency=DependencyStatus.WAITING)
                 .values_list("resource_group_id", flat=True).distinct())
    for group_id in sorted(groups):
        request_pass_on_commit(group_id)


def allocations_transition(
    *,
    ids: list[int],
    from_state: str,
    to: str,
    reason: str = "",
    decision: PreemptionDecision | None = None,
    now: datetime | None = None,
    fields: dict[str, Any] | None = None,
    each: dict[int, dict[str, Any]] | None = None,
    decision_of: dict[int, PreemptionDecision | None] | None = None,
) -> None:
    """``allocation_transition`` for many allocations in the same state, in two statements.

    ``fields`` are written to every row; ``each`` gives values that differ per row (every row
    the same keys, ``state_changed_at`` among them if the moment differs), and ``decision_of``
    each row's decision for its event. All move or none: if any of them is no longer in
    ``from_state`` (a racing report, a cancel), InvalidTransition is raised and the
    transaction writes nothing.
    """
    if not allowed(from_state, to):
        raise InvalidTransition(f"allocations cannot go from {from_state} to {to}", from_state=from_state,
                                to_state=to)
    moment = now or timezone.now()
    wanted = set(ids)
    changes: dict[str, Any] = {"state": to, "state_changed_at": moment, **(fields or {})}
    if each and connection.vendor == "postgresql":
        with transaction.atomic():
            updated = _update_each(sorted(wanted), from_state, changes, each)
            if updated != len(wanted):
                raise InvalidTransition(f"{len(wanted) - updated} of {len(wanted)} allocations are no longer "
                                        f"{from_state}", from_state=from_state, to_state=to)
            _events(wanted, from_state, to, reason, decision, decision_of)
        return
    if each:
        for key in next(iter(each.values())):
            field = Allocation._meta.get_field(key)
            values = {pk: getattr(row[key], "pk", row[key]) for pk, row in each.items()}
            if all(v is None for v in values.values()):  # an untyped NULL in a CASE reads as text
                changes[field.attname] = None
                continue
            changes[field.attname] = Case(*[When(pk=pk, then=Value(
                v, output_field=field.target_field if field.is_relation else field)) for pk, v in values.items()])
    with transaction.atomic():
        updated = Allocation.objects.filter(pk__in=wanted, state=from_state).update(**changes)
        if updated != len(wanted):
            raise InvalidTransition(f"{len(wanted) - updated} of {len(wanted)} allocations are no longer "
                                    f"{from_state}", from_state=from_state, to_state=to)
        _events(wanted, from_state, to, reason, decision, decision_of)


def _events(ids: set[int], from_state: str, to: str, reason: str, decision: PreemptionDecision | None,
            decision_of: dict[int, PreemptionDecision | None] | None) -> None:
    of = decision_of or {}
    insert_rows(AllocationEvent, ["allocation_id", "from_state", "to_state", "reason", "decision_id"],
                [(pk, from_state, to, reason[:255], getattr(of.get(pk, decision), "pk", None)) for pk in sorted(ids)])


def _update_each(ids: list[int], from_state: str, changes: dict[str, Any], each: dict[int, dict[str, Any]]) -> int:
    """One ``UPDATE ... FROM unnest(...)`` (PostgreSQL) for values that differ per row: Django
    would build a CASE per column with a branch per row, which costs more to compile than to run;
    as arrays, the statement's text is the same for any number of rows."""
    table = Allocation._meta.db_table
    keys = list(next(iter(each.values())))
    per_row = [Allocation._meta.get_field(k) for k in keys]
    common = [(Allocation._meta.get_field(k), v) for k, v in changes.items() if k not in each[ids[0]]]
    quote = connection.ops.quote_name
    sets = [f"{quote(f.column)} = {stored(f, '%b')}" for f, _ in common]
    sets += [f"{quote(f.column)} = {stored(f, f'v.c{i}')}" for i, f in enumerate(per_row)]
    arrays = ", ".join(["%b::bigint[]"] + [f"%b::{array_type(f)}[]" for f in per_row])
    params: list[Any] = [column(f, [v])[0] for f, v in common]
    params.append(ids)
    params += [column(f, [getattr(each[pk][k], "pk", each[pk][k]) for pk in ids])
               for f, k in zip(per_row, keys, strict=True)]
    params.append(from_state)
    columns = ", ".join(["id"] + [f"c{i}" for i in range(len(per_row))])
    return len(execute(f"UPDATE {table} AS a SET {', '.join(sets)} FROM unnest({arrays}) AS v({columns}) "
                       "WHERE a.id = v.id AND a.state = %b RETURNING a.id", params))
