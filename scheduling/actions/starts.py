"""Starting allocations: the one way pending work starts running, alone or as a batch.

On PostgreSQL one statement does it all (the state change, the placements, the
GPUs each placement is bound to and the events), so a batch costs the same few
round trips whatever its size; the
embedded mode (SQLite) uses the ORM, a statement per step. Either way the state
table is consulted first (for the whole batch at once), start frames go to the
agents and live events to the pages after commit.

GPUs are bound where the node's agent reported its devices (nodes.NodeDevice):
each placement gets the lowest-numbered healthy devices no live placement holds,
as many as its GPUs. The unique (node, index) of PlacementDevice makes a device
bound twice an error of the database, whoever races. A node whose devices are
unknown binds none (its start frames carry no devices).
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from django.db import connection, transaction
from django.db.models import Case, F, JSONField, Value, When
from django.utils import timezone

from nodes.models import Node, NodeDevice
from nodes.protocol import Start
from scheduling.actions.quotas import check_running_quota
from scheduling.dispatch import agent_commands_on_commit, events_on_commit
from scheduling.errors import Conflict, InvalidTransition
from scheduling.models import (
    Allocation,
    AllocationEvent,
    Membership,
    Placement,
    PlacementDevice,
    Tenant,
)
from scheduling.models.allocations import PlacementKind
from scheduling.passes.bulk import execute
from scheduling.states import State, allowed

# What a start frame needs (start_frame below).
STARTED_FIELDS = ("id", "tenant_id", "user_id", "command", "env", "per_node_gpu", "per_node_cpu", "per_node_memory",
                  "resume_from_checkpoint", "run")


RunAs = tuple[str, str, bool]  # the Unix user, group, and whether root is allowed (the tenant's leave)
Devices = list[dict[str, Any]]  # [{index, uuid}]


def start_frame(alloc: Allocation, node_name: str, *, devices: Devices | None = None,
                run_as: RunAs = ("", "", False)) -> Start:
    """The agent's command to run ``alloc``'s part on ``node_name``, on these GPUs, as this user."""
    user, group, allow_root = run_as
    return Start(allocation=str(alloc.pk), command=list(alloc.command or []), env=dict(alloc.env or {}),
                 resources={r: getattr(alloc, f"per_node_{r}") for r in ("gpu", "cpu", "memory")},
                 resume_from_checkpoint=alloc.resume_from_checkpoint, checkpoint_dir=f"checkpoints/{alloc.pk}",
                 devices=list(devices or []), user=user, group=group, allow_root=allow_root, run=alloc.run)


def run_as_of(alloc: Allocation) -> RunAs:
    """Who ``alloc`` runs as: its submitter's own mapping in the tenant (Membership) where the
    operator set one, else the tenant's; root only with the tenant's leave."""
    tenant = alloc.tenant
    member = (Membership.objects.filter(tenant_id=alloc.tenant_id, user_id=alloc.user_id).exclude(unix_user="")
              .values_list("unix_user", "unix_group").first())
    user, group = member if member is not None else (tenant.unix_user, tenant.unix_group)
    return (user, group, tenant.allow_root)


def bound_devices(placement_id: int) -> Devices:
    """The GPUs a placement holds, for its start frame."""
    return list(PlacementDevice.objects.filter(placement_id=placement_id).order_by("index").values("index", "uuid"))


def start_again(alloc: Allocation, node_name: str, placement_id: int) -> Start:
    """The start of ``alloc``'s part on ``node_name`` sent again (a hello found it not running there):
    the GPUs its placement holds, as whom it runs."""
    return start_frame(alloc, node_name, devices=bound_devices(placement_id), run_as=run_as_of(alloc))


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
        started, devices, run_as = _start_in_one_statement(ran_on, node_ids, moment)
    else:
        started, devices, run_as = _start_with_the_orm(ran_on, node_ids, moment)
    agent_commands_on_commit([(name, start_frame(a, name, devices=devices.get((a.pk, name)),
                                                 run_as=run_as[a.pk]))
                              for a in started for name in ran_on[a.pk]])
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


Started = tuple[list[Allocation], dict[tuple[int, str], Devices], dict[int, RunAs]]


def _start_with_the_orm(ran_on: dict[int, list[str]], node_ids: dict[str, int], moment: datetime) -> Started:
    allocs = list(Allocation.objects.select_for_update().filter(pk__in=list(ran_on), state=State.PENDING)
                  .only(*STARTED_FIELDS))
    placements = Placement.objects.bulk_create([
        Placement(allocation_id=a.pk, node_id=node_ids[name], gpu=a.per_node_gpu, cpu=a.per_node_cpu,
                  memory=a.per_node_memory) for a in allocs for name in ran_on[a.pk]])
    devices = _bind_with_the_orm(placements, {v: k for k, v in node_ids.items()})
    Allocation.objects.filter(pk__in=[a.pk for a in allocs], state=State.PENDING).update(
        state=State.RUNNING, started_at=moment, state_changed_at=moment, run=F("run") + 1,
        ran_on=Case(*[When(pk=a.pk, then=Value(ran_on[a.pk], output_field=JSONField())) for a in allocs]))
    for a in allocs:
        a.run += 1  # as the update above counted it (the rows are locked)
    AllocationEvent.objects.bulk_create([
        AllocationEvent(allocation_id=a.pk, from_state=State.PENDING, to_state=State.RUNNING,
                        reason=placed_reason(ran_on[a.pk])) for a in allocs])
    tenants = {t.pk: t for t in Tenant.objects.filter(pk__in={a.tenant_id for a in allocs})}
    members = {(m.tenant_id, m.user_id): m for m in Membership.objects.filter(
        tenant_id__in=list(tenants), user_id__in={a.user_id for a in allocs}).exclude(unix_user="")}
    run_as = {}
    for a in allocs:
        t, m = tenants[a.tenant_id], members.get((a.tenant_id, a.user_id))
        run_as[a.pk] = (m.unix_user, m.unix_group, t.allow_root) if m else (t.unix_user, t.unix_group, t.allow_root)
    return allocs, devices, run_as


def _bind_with_the_orm(placements: list[Placement], names: dict[int, str]) -> dict[tuple[int, str], Devices]:
    """Each placement's GPUs: the node's lowest healthy devices no placement holds (as the
    statement below does)."""
    nodes = {p.node_id for p in placements if p.gpu}
    free: dict[int, list[tuple[int, str]]] = {}
    held = set(PlacementDevice.objects.filter(node_id__in=nodes).values_list("node_id", "index"))
    for node_id, index, uuid in (NodeDevice.objects.filter(node_id__in=nodes, healthy=True)
                                 .order_by("index").values_list("node_id", "index", "uuid")):
        if (node_id, index) not in held:
            free.setdefault(node_id, []).append((index, uuid))
    rows, bound = [], {}
    for p in sorted(placements, key=lambda p: p.allocation_id):
        take, free[p.node_id] = free.get(p.node_id, [])[:p.gpu], free.get(p.node_id, [])[p.gpu:]
        rows += [PlacementDevice(placement=p, node_id=p.node_id, index=i, uuid=u) for i, u in take]
        bound[(p.allocation_id, names[p.node_id])] = [{"index": i, "uuid": u} for i, u in take]
    PlacementDevice.objects.bulk_create(rows)
    return bound


def placed_reason(nodes: list[str]) -> str:
    """The event of a start: where it runs (every start says so, however it was made)."""
    return f"placed on {', '.join(nodes)}"[:255]


def _start_in_one_statement(ran_on: dict[int, list[str]], node_ids: dict[str, int], moment: datetime) -> Started:
    ids = list(ran_on)
    pair_ids = [pk for pk, nodes in ran_on.items() for _ in nodes]
    pair_nodes = [node_ids[name] for nodes in ran_on.values() for name in nodes]
    alloc, placement, event, device, bound, tenant, member = (m._meta.db_table for m in (
        Allocation, Placement, AllocationEvent, NodeDevice, PlacementDevice, Tenant, Membership))
    returned = ", ".join(f"a.{f}" for f in STARTED_FIELDS)
    # The batch goes as binary arrays (scheduling/bulk.py), so the statement's text is the same for
    # any batch and no value is quoted apart.
    sql = (
        "WITH v(id, ran_on, reason) AS (SELECT t.id, t.ran_on::jsonb, t.reason "
        "FROM unnest(%b::bigint[], %b::text[], %b::text[]) AS t(id, ran_on, reason)), "
        "p(allocation_id, node_id) AS (SELECT * FROM unnest(%b::bigint[], %b::bigint[])), "
        f"started AS (UPDATE {alloc} AS a SET state = %b, started_at = %b, state_changed_at = %b, "
        f"ran_on = v.ran_on, run = a.run + 1 FROM v WHERE a.id = v.id AND a.state = %b RETURNING {returned}, v.reason), "
        f"placed AS (INSERT INTO {placement} (allocation_id, node_id, kind, gpu, cpu, memory, created_at) "
        f"SELECT s.id, p.node_id, %b, s.per_node_gpu, s.per_node_cpu, s.per_node_memory, now() "
        f"FROM started s JOIN p ON p.allocation_id = s.id RETURNING id, allocation_id, node_id, gpu), "
        # GPUs: placements of one node take consecutive runs of its free healthy devices.
        "need AS (SELECT id, node_id, gpu, sum(gpu) OVER (PARTITION BY node_id ORDER BY allocation_id) - gpu AS skip "
        "FROM placed WHERE gpu > 0), "
        f"free AS (SELECT d.node_id, d.\"index\", d.uuid, row_number() OVER (PARTITION BY d.node_id "
        f"ORDER BY d.\"index\") AS rn FROM {device} d WHERE d.healthy AND d.node_id IN (SELECT node_id FROM need) "
        f"AND NOT EXISTS (SELECT 1 FROM {bound} b WHERE b.node_id = d.node_id AND b.\"index\" = d.\"index\")), "
        f"bound AS (INSERT INTO {bound} (placement_id, node_id, \"index\", uuid) "
        "SELECT n.id, n.node_id, f.\"index\", f.uuid FROM need n JOIN free f ON f.node_id = n.node_id "
        "AND f.rn > n.skip AND f.rn <= n.skip + n.gpu RETURNING placement_id, node_id, \"index\", uuid), "
        "devs AS (SELECT pl.allocation_id, jsonb_agg(jsonb_build_array(b.node_id, b.\"index\", b.uuid) "
        "ORDER BY b.node_id, b.\"index\") AS d FROM bound b JOIN placed pl ON pl.id = b.placement_id "
        "GROUP BY pl.allocation_id), "
        f"logged AS (INSERT INTO {event} (allocation_id, from_state, to_state, reason, created_at) "
        f"SELECT s.id, %b, %b, s.reason, now() FROM started s) "
        # Who it runs as: the submitter's own mapping in the tenant where there is one, else the tenant's.
        f"SELECT {', '.join('s.' + f for f in STARTED_FIELDS)}, devs.d, COALESCE(m.unix_user, t.unix_user), "
        f"CASE WHEN m.id IS NULL THEN t.unix_group ELSE m.unix_group END, t.allow_root "
        f"FROM started s LEFT JOIN devs ON devs.allocation_id = s.id JOIN {tenant} t ON t.id = s.tenant_id "
        f"LEFT JOIN {member} m ON m.tenant_id = s.tenant_id AND m.user_id = s.user_id AND m.unix_user <> ''")
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
    started = [Allocation.from_db(db, names, [c(row[i], None, connection) if c is not None else row[i]
                                              for i, c in zip(at, convert, strict=True)]) for row in rows_back]
    node_names = {v: k for k, v in node_ids.items()}
    devices: dict[tuple[int, str], Devices] = {}
    run_as: dict[int, RunAs] = {}
    extra = len(STARTED_FIELDS)
    for a, row in zip(started, rows_back, strict=True):
        for node_id, index, uuid in json.loads(row[extra]) if row[extra] else []:
            devices.setdefault((a.pk, node_names[node_id]), []).append({"index": index, "uuid": uuid})
        run_as[a.pk] = (row[extra + 1], row[extra + 2], row[extra + 3])
    return started, devices, run_as
