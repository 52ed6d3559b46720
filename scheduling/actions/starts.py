"""Starting allocations: the one way pending work starts running, alone or as a batch.

On PostgreSQL one statement does it all (the state change, the placements and
the events), so a batch costs the same few round trips whatever its size; the
embedded mode (SQLite) uses the ORM, a statement per step. Either way the state
table is consulted first (for the whole batch at once), start frames go to the
agents and live events to the pages after commit.
"""

from __future__ import annotations

import json
from datetime import datetime

from django.db import connection, transaction
from django.db.models import Case, JSONField, Value, When
from django.utils import timezone

from nodes.models import Node
from nodes.protocol import Start
from scheduling.actions.quotas import check_running_quota
from scheduling.dispatch import agent_commands_on_commit, events_on_commit
from scheduling.errors import Conflict, InvalidTransition
from scheduling.models import Allocation, AllocationEvent, Placement
from scheduling.models.allocations import PlacementKind
from scheduling.passes.bulk import execute
from scheduling.states import State, allowed

# What a start frame needs (start_frame below).
STARTED_FIELDS = ("id", "tenant_id", "command", "env", "per_node_gpu", "per_node_cpu", "per_node_memory",
                  "resume_from_checkpoint")


def start_frame(alloc: Allocation, node_name: str) -> Start:
    """The agent's command to run ``alloc``'s part on ``node_name``."""
    return Start(allocation=str(alloc.pk), command=list(alloc.command or []), env=dict(alloc.env or {}),
                 resources={r: getattr(alloc, f"per_node_{r}") for r in ("gpu", "cpu", "memory")},
                 resume_from_checkpoint=alloc.resume_from_checkpoint, checkpoint_dir=f"checkpoints/{alloc.pk}")


def allocations_start(ran_on: dict[int, list[str]], node_ids: dict[str, int], moment: datetime, *,
                      had_holds: bool) -> list[Allocation]:
    """Pending -> running on the given nodes (allocation id -> node names), with their placements,
    events, start frames and live events; call inside a transaction. An allocation no longer
    pending (cancelled meanwhile) is skipped. ``had_holds``: some of them hold nodes (their held
    placements are replaced). Returns the started allocations, with the fields of STARTED_FIELDS."""
    if not ran_on:
        return []
    if not allowed(State.PENDING, State.RUNNING):  # the whole batch makes this one transition
        raise InvalidTransition("allocations cannot go from pending to running", from_state=State.PENDING,
                                to_state=State.RUNNING)
    if had_holds:
        Placement.objects.filter(allocation_id__in=list(ran_on)).delete()
    if connection.vendor == "postgresql":
        started = _start_in_one_statement(ran_on, node_ids, moment)
    else:
        started = _start_with_the_orm(ran_on, node_ids, moment)
    agent_commands_on_commit([(name, start_frame(a, name)) for a in started for name in ran_on[a.pk]])
    by_tenant: dict[int, list[int]] = {}
    for a in sorted(started, key=lambda a: a.pk):
        by_tenant.setdefault(a.tenant_id, []).append(a.pk)
    # One check of who watches and one send for the batch, not one per tenant.
    events_on_commit([("allocations.placed", {"allocations": pks}, tenant_id)
                      for tenant_id, pks in by_tenant.items()])
    return started


def allocation_place(*, allocation: Allocation, node_ids: dict[str, int], nodes: list[str],
                     borrowed: list[str], now: datetime | None = None) -> Allocation:
    """Start one pending allocation on ``nodes``, borrowing ``borrowed`` from other vClusters
    (its held placements, if any, are replaced)."""
    moment = now or timezone.now()
    with transaction.atomic():
        alloc = Allocation.objects.select_for_update().get(pk=allocation.pk)
        if alloc.state != State.PENDING:
            raise Conflict(f"allocation {alloc.pk} is {alloc.state}, not pending")
        check_running_quota(alloc)
        if borrowed and alloc.vcluster_id:  # locked as give_back_borrowed locks them (see there)
            lent = list(Node.objects.select_for_update().filter(name__in=borrowed).order_by("pk")
                        .values_list("pk", flat=True))
            Node.objects.filter(pk__in=lent, borrowed_by__isnull=True).update(borrowed_by=alloc.vcluster_id)
        if not allocations_start({alloc.pk: list(nodes)}, node_ids, moment, had_holds=True):
            raise Conflict(f"allocation {alloc.pk} is no longer pending")
    alloc.refresh_from_db()
    return alloc


def _start_with_the_orm(ran_on: dict[int, list[str]], node_ids: dict[str, int],
                        moment: datetime) -> list[Allocation]:
    allocs = list(Allocation.objects.select_for_update().filter(pk__in=list(ran_on), state=State.PENDING)
                  .only(*STARTED_FIELDS))
    Placement.objects.bulk_create([
        Placement(allocation_id=a.pk, node_id=node_ids[name], gpu=a.per_node_gpu, cpu=a.per_node_cpu,
                  memory=a.per_node_memory) for a in allocs for name in ran_on[a.pk]])
    Allocation.objects.filter(pk__in=[a.pk for a in allocs], state=State.PENDING).update(
        state=State.RUNNING, started_at=moment, state_changed_at=moment,
        ran_on=Case(*[When(pk=a.pk, then=Value(ran_on[a.pk], output_field=JSONField())) for a in allocs]))
    AllocationEvent.objects.bulk_create([
        AllocationEvent(allocation_id=a.pk, from_state=State.PENDING, to_state=State.RUNNING,
                        reason=placed_reason(ran_on[a.pk])) for a in allocs])
    return allocs


def placed_reason(nodes: list[str]) -> str:
    """The event of a start: where it runs (every start says so, however it was made)."""
    return f"placed on {', '.join(nodes)}"[:255]


def _start_in_one_statement(ran_on: dict[int, list[str]], node_ids: dict[str, int],
                            moment: datetime) -> list[Allocation]:
    ids = list(ran_on)
    pair_ids = [pk for pk, nodes in ran_on.items() for _ in nodes]
    pair_nodes = [node_ids[name] for nodes in ran_on.values() for name in nodes]
    alloc, placement, event = (m._meta.db_table for m in (Allocation, Placement, AllocationEvent))
    returned = ", ".join(f"a.{f}" for f in STARTED_FIELDS)
    # The batch goes as binary arrays (scheduling/bulk.py), so the statement's text is the same for
    # any batch and no value is quoted apart.
    sql = (
        "WITH v(id, ran_on, reason) AS (SELECT t.id, t.ran_on::jsonb, t.reason "
        "FROM unnest(%b::bigint[], %b::text[], %b::text[]) AS t(id, ran_on, reason)), "
        "p(allocation_id, node_id) AS (SELECT * FROM unnest(%b::bigint[], %b::bigint[])), "
        f"started AS (UPDATE {alloc} AS a SET state = %b, started_at = %b, state_changed_at = %b, "
        f"ran_on = v.ran_on FROM v WHERE a.id = v.id AND a.state = %b RETURNING {returned}, v.reason), "
        f"placed AS (INSERT INTO {placement} (allocation_id, node_id, kind, gpu, cpu, memory, created_at) "
        f"SELECT s.id, p.node_id, %b, s.per_node_gpu, s.per_node_cpu, s.per_node_memory, now() "
        f"FROM started s JOIN p ON p.allocation_id = s.id), "
        f"logged AS (INSERT INTO {event} (allocation_id, from_state, to_state, reason, created_at) "
        f"SELECT s.id, %b, %b, s.reason, now() FROM started s) "
        f"SELECT {', '.join(STARTED_FIELDS)} FROM started")
    params = [ids, [json.dumps(ran_on[pk]) for pk in ids], [placed_reason(ran_on[pk]) for pk in ids], pair_ids,
              pair_nodes, State.RUNNING, moment, moment, State.PENDING, PlacementKind.ASSIGNED, State.PENDING,
              State.RUNNING]
    rows_back = execute(sql, params)
    # Raw rows as the ORM would have read them with only() (JSON arrives as text): the other
    # fields are deferred, which also spares computing their defaults (a third of the batch's time).
    fields = [f for f in Allocation._meta.concrete_fields if f.attname in STARTED_FIELDS]
    at = [STARTED_FIELDS.index(f.attname) for f in fields]
    convert = [getattr(f, "from_db_value", None) for f in fields]
    names = [f.attname for f in fields]
    db = connection.alias
    return [Allocation.from_db(db, names, [c(row[i], None, connection) if c is not None else row[i]
                                           for i, c in zip(at, convert, strict=True)]) for row in rows_back]
