"""The submission path's statements, written out once per process (``models.rows``).

A submission runs about ten statements; through the ORM each was compiled anew for every
request (its joins, its columns, its WHERE clause), and compiling cost the API server more CPU
than the database spent answering. The same statements run on PostgreSQL and SQLite (``FOR
UPDATE`` only where the database has it). What they return is what the ORM queries they
replace returned; tests/scheduling/test_admission_sql.py holds them to those.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from django.db import connection, models

from nodes.models import Node
from scheduling.models import (
    Allocation,
    AllocationEvent,
    Membership,
    Quota,
    ResourceGroup,
    Tenant,
    VCluster,
)
from scheduling.models.allocations import RESOURCES
from scheduling.models.rows import M, fetch, load, quote, select_list, table, width
from scheduling.models.tenancy import membership_row

# -- the resource group named ------------------------------------------------------------------

@functools.cache
def _group_sql(vendor: str) -> str:
    g = quote("g")
    return f"SELECT {select_list(ResourceGroup, g)} FROM {table(ResourceGroup)} {g} WHERE {g}.{quote('name')} = %s"


def group_named(name: Any) -> ResourceGroup | None:
    """The resource group of that name, None if there is none. ``name`` is prepared as the ORM
    prepares a lookup's value (a number is looked up as its text)."""
    rows = fetch(_group_sql(connection.vendor), [ResourceGroup._meta.get_field("name").get_prep_value(name)])
    return load(ResourceGroup, rows[0]) if rows else None


# -- who submits: membership, tenant and quota in one statement -------------------------------

@functools.cache
def _membership_sql(vendor: str, named: bool) -> str:
    m, t, q = (quote(x) for x in ("m", "t", "q"))
    return (f"SELECT {select_list(Membership, m)}, {select_list(Tenant, t)}, {select_list(Quota, q)} "
            f"FROM {table(Membership)} {m} INNER JOIN {table(Tenant)} {t} ON {t}.{quote('id')} = {m}.{quote('tenant_id')} "
            f"LEFT OUTER JOIN {table(Quota)} {q} ON {q}.{quote('tenant_id')} = {t}.{quote('id')} "
            f"WHERE {m}.{quote('user_id')} = %s" + (f" AND {t}.{quote('name')} = %s" if named else "") + " LIMIT 2")


def memberships(user_id: Any, tenant_name: str | None) -> list[Membership]:
    """At most two of the user's memberships (of the tenant named, if one is), each with its tenant
    and the tenant's quota (None if it has none) read with it, as ``select_related`` leaves them."""
    params = [user_id, tenant_name] if tenant_name else [user_id]
    return [membership_row(row) for row in fetch(_membership_sql(connection.vendor, bool(tenant_name)), params)]


@functools.cache
def _tenant_name_at() -> int:
    """Where a membership's row (``membership_row``) holds its tenant's name."""
    return width(Membership) + [f.attname for f in Tenant._meta.concrete_fields].index("name")


def memberships_of_rows(rows: Sequence[Sequence[Any]], tenant_name: str | None) -> list[Membership]:
    """``memberships`` from the rows of every membership of the user read with its API token
    (``ApiToken.user_for``), without a query: the same memberships, tenants and quotas."""
    if tenant_name:
        at = _tenant_name_at()
        rows = [row for row in rows if row[at] == tenant_name]
    return [membership_row(row) for row in rows[:2]]


# -- the vCluster asked for, and whether the tenant may use it ---------------------------------

@functools.cache
def _vcluster_sql(vendor: str) -> str:
    v, x = quote("v"), quote("x")
    through = VCluster.tenants.through
    members = f"SELECT 1 FROM {table(through)} {x} WHERE {x}.{quote('vcluster_id')} = {v}.{quote('id')}"
    return (f"SELECT {select_list(VCluster, v)}, EXISTS({members}), EXISTS({members} AND {x}.{quote('tenant_id')} = %s) "
            f"FROM {table(VCluster)} {v} WHERE {v}.{quote('resource_group_id')} = %s AND {v}.{quote('name')} = %s")


def _vcluster_row(row: Sequence[Any]) -> VCluster:
    """The group's vCluster of that name, with ``restricted`` (it lists the tenants that may use
    it) and ``admitted`` (the tenant is among them)."""
    n = width(VCluster)
    vc = load(VCluster, row[:n])
    vc.restricted, vc.admitted = bool(row[n]), bool(row[n + 1])  # type: ignore[attr-defined]
    return vc


# -- the group's nodes, aggregated per vCluster ------------------------------------------------

@functools.cache
def _nodes_sql(vendor: str) -> str:
    n, v = quote("n"), quote("v")
    holds = " AND ".join(f"{n}.{quote(r)} >= %s" for r in RESOURCES)
    most = ", ".join(f"MAX({n}.{quote(r)})" for r in RESOURCES)
    lend, pct = f"{v}.{quote('allow_lending')}", f"{v}.{quote('max_borrow_pct')}"
    return (f"SELECT {n}.{quote('vcluster_id')}, COUNT({n}.{quote('id')}), SUM(CASE WHEN {holds} THEN 1 ELSE 0 END), "
            f"{most}, {lend}, {pct} FROM {table(Node)} {n} "
            f"LEFT OUTER JOIN {table(VCluster)} {v} ON {v}.{quote('id')} = {n}.{quote('vcluster_id')} "
            f"WHERE {n}.{quote('resource_group_id')} = %s GROUP BY {n}.{quote('vcluster_id')}, {lend}, {pct}")


def node_summary(group_id: int, need: dict[str, int]) -> list[dict[str, Any]]:
    """One row per vCluster whose nodes are in the group (``vcluster_id`` None: nodes with no
    home): ``nodes``, ``holding`` (how many have ``need`` of every resource), ``most_<resource>``,
    and the vCluster's ``allow_lending`` and ``max_borrow_pct`` (None for no home)."""
    return [_node_row(row) for row in fetch(_nodes_sql(connection.vendor), [*(need[r] for r in RESOURCES), group_id])]


def _node_row(row: Sequence[Any]) -> dict[str, Any]:
    home, count, holding, *most = row[:3 + len(RESOURCES)]
    lend, pct = row[3 + len(RESOURCES):]
    return {"vcluster_id": home, "nodes": int(count), "holding": int(holding or 0),
            **{f"most_{r}": m for r, m in zip(RESOURCES, most, strict=True)},
            "allow_lending": None if lend is None else bool(lend), "max_borrow_pct": pct}


@functools.cache
def _vcluster_and_nodes_sql(vendor: str) -> str:
    """``_vcluster_sql``'s row (or NULLs) beside each of ``_nodes_sql``'s rows (or one row of
    NULLs where the group has no nodes)."""
    one, vv, nn = quote("one"), quote("vv"), quote("nn")
    return (f"SELECT {vv}.*, {nn}.* FROM (SELECT 1) {one} LEFT OUTER JOIN ({_vcluster_sql(vendor)}) {vv} ON 1 = 1 "
            f"LEFT OUTER JOIN ({_nodes_sql(vendor)}) {nn} ON 1 = 1")


def vcluster_and_nodes(group_id: int, name: str, tenant_id: int,
                       need: dict[str, int]) -> tuple[VCluster | None, list[dict[str, Any]]]:
    """The group's vCluster of that name (None if there is none: ``_vcluster_row``) and
    ``node_summary`` of the same group, in one round trip: a submission naming its vCluster needs
    both."""
    rows = fetch(_vcluster_and_nodes_sql(connection.vendor),
                 [tenant_id, group_id, name, *(need[r] for r in RESOURCES), group_id])
    k = width(VCluster) + 2
    vc = _vcluster_row(rows[0][:k]) if rows[0][0] is not None else None
    return vc, [_node_row(row[k:]) for row in rows if row[k + 1] is not None]


# -- the quota, locked, and what the tenant's work uses ---------------------------------------

@functools.cache
def _quota_sql(vendor: str, lock: bool) -> str:
    q = quote("q")
    return (f"SELECT {select_list(Quota, q)} FROM {table(Quota)} {q} WHERE {q}.{quote('tenant_id')} = %s"
            + (" FOR UPDATE" if lock and connection.features.has_select_for_update else ""))


def quota_locked(tenant_id: int) -> Quota | None:
    """The tenant's quota row, locked until the transaction ends (None: the tenant has none)."""
    rows = fetch(_quota_sql(connection.vendor, True), [tenant_id])
    return load(Quota, rows[0]) if rows else None


@functools.cache
def _usage_sql(vendor: str, states: int) -> str:
    a = quote("a")
    count, gpu = f"{a}.{quote('node_count')}", f"{a}.{quote('per_node_gpu')}"
    return (f"SELECT COUNT({a}.{quote('id')}), SUM({count}), SUM({count} * {gpu}) FROM {table(Allocation)} {a} "
            f"WHERE {a}.{quote('tenant_id')} = %s AND {a}.{quote('state')} IN ({', '.join(['%s'] * states)})")


def usage_row(tenant_id: int, states: Sequence[str]) -> tuple[int, int, int]:
    """How many of the tenant's allocations are in ``states``, their nodes and their GPUs."""
    n, nodes, gpus = fetch(_usage_sql(connection.vendor, len(states)), [tenant_id, *states])[0]
    return int(n or 0), int(nodes or 0), int(gpus or 0)


# -- one new row ------------------------------------------------------------------------------

@functools.cache
def _insert_sql(model: type[models.Model], vendor: str) -> tuple[str, tuple[models.Field, ...]]:
    fields = tuple(f for f in model._meta.concrete_fields if not f.primary_key)
    pk = model._meta.pk
    assert pk is not None
    return (f"INSERT INTO {table(model)} ({', '.join(quote(f.column) for f in fields)}) "
            f"VALUES ({', '.join(['%s'] * len(fields))}) RETURNING {quote(pk.column)}", fields)


def insert(obj: M) -> M:
    """``obj.save()`` for a new row of a model no signal watches, without compiling its INSERT
    each time: every column's value as ``save`` prepares it (``auto_now_add`` set), the new id
    returned. Where the database cannot return it, ``save()`` itself."""
    if not connection.features.can_return_columns_from_insert:
        obj.save(force_insert=True)
        return obj
    sql, fields = _insert_sql(type(obj), connection.vendor)
    params = [f.get_db_prep_save(f.pre_save(obj, True), connection) for f in fields]
    obj.pk = fetch(sql, params)[0][0]
    obj._state.adding, obj._state.db = False, connection.alias
    return obj


@functools.cache
def _submitted_sql(vendor: str, states: int) -> str:
    """The allocation's INSERT as a CTE, its first event's INSERT taking the new id from it, and
    the tenant's usage (``_usage_sql``) read beside them: every part of one statement reads the
    same snapshot, taken when it starts, so the usage is that before this row."""
    alloc_sql, _ = _insert_sql(Allocation, vendor)
    event_sql, fields = _insert_sql(AllocationEvent, vendor)
    a, e, u = quote("a"), quote("e"), quote("u")
    values = ", ".join(f"(SELECT {quote('id')} FROM {a})" if f.attname == "allocation_id" else "%s" for f in fields)
    event_sql = (f"INSERT INTO {table(AllocationEvent)} ({', '.join(quote(f.column) for f in fields)}) "
                 f"VALUES ({values}) RETURNING {quote('id')}, {quote('allocation_id')}")
    return (f"WITH {u} AS ({_usage_sql(vendor, states)}), {a} AS ({alloc_sql}), {e} AS ({event_sql}) "
            f"SELECT {e}.*, {u}.* FROM {e} CROSS JOIN {u}")


def insert_submitted(alloc: Allocation, event: AllocationEvent, states: Sequence[str]) -> tuple[int, int, int]:
    """``insert`` of a new allocation and then of its first event (``event.allocation`` set to
    it); returns ``usage_row`` of the allocation's tenant in ``states`` as it was before this row.
    On PostgreSQL all in one statement: two round trips fewer for every submission. The caller
    holds the tenant's quota row locked, so the usage read here is current (no other submission
    of the tenant can commit meanwhile), and a check against it that fails rolls the row back."""
    if connection.vendor != "postgresql":
        before = usage_row(alloc.tenant_id, states)
        insert(alloc)
        event.allocation = alloc
        insert(event)
        return before
    _, alloc_fields = _insert_sql(Allocation, connection.vendor)
    _, event_fields = _insert_sql(AllocationEvent, connection.vendor)
    params: list[Any] = [alloc.tenant_id, *states]
    params += [f.get_db_prep_save(f.pre_save(alloc, True), connection) for f in alloc_fields]
    params += [f.get_db_prep_save(f.pre_save(event, True), connection) for f in event_fields
               if f.attname != "allocation_id"]
    event.pk, alloc.pk, n, nodes, gpus = fetch(_submitted_sql(connection.vendor, len(states)), params)[0]
    event.allocation = alloc
    for obj in (alloc, event):
        obj._state.adding, obj._state.db = False, connection.alias
    return int(n or 0), int(nodes or 0), int(gpus or 0)
