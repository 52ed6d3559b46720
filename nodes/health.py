"""GPU health from heartbeats (docs/agent-protocol.md, GPU health): judged against the node's
thresholds, a node past them is Degraded with the reason on its page, in the audit log and the
live feed; a new uncorrectable ECC error on a device that running work holds marks the device
unhealthy and asks that work to checkpoint now (the preemption sequence's checkpoint: it is
suspended and queued again, to resume on healthy devices).

Xid events are reported once, in the heartbeat after they happened; the node keeps those it was
told of (so a fault stays visible) until an operator clears them, audited.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import orjson
from django.db import connection, transaction
from django.utils import timezone

from nodes.inventory import mismatch_of, record_mismatch
from nodes.models import Node, NodeDevice, NodeState
from scheduling.actions.policies import policy_change_record
from scheduling.actions.preemption import allocation_preempt
from scheduling.dispatch import event_on_commit
from scheduling.models import Allocation, AllocationEvent, PlacementDevice
from scheduling.passes.snapshot import policy_of
from scheduling.states import State

MAX_XIDS = 16  # kept per GPU
SILENT_S = 30  # nodes/actions.py HEARTBEAT_TIMEOUT_S: silent this long, a node is Degraded for silence
THRESHOLDS = ("gpu_max_temperature_c", "gpu_max_ecc_uncorrectable", "gpu_retired_pending_degrades", "gpu_xids")


def xid_codes(text: str) -> set[int]:
    return {int(x) for x in text.split(",") if x.strip().isdigit()}


def judge(node: Node, gpus: list[dict[str, Any]]) -> str:
    """Why these GPUs make ``node`` Degraded under its thresholds ("" when they do not)."""
    critical = xid_codes(node.gpu_xids)
    reasons = []
    for gpu in sorted(gpus, key=lambda g: g["index"]):
        i = gpu["index"]
        temperature = gpu.get("temperature_c")
        if temperature is not None and temperature > node.gpu_max_temperature_c:
            reasons.append(f"GPU {i} above {node.gpu_max_temperature_c} C")  # not its degrees: they move
        ecc = gpu.get("ecc_uncorrectable", 0)
        if ecc > node.gpu_max_ecc_uncorrectable:
            reasons.append(f"GPU {i}: {ecc} uncorrectable ECC error(s) (limit {node.gpu_max_ecc_uncorrectable})")
        if gpu.get("retired_pending") and node.gpu_retired_pending_degrades:
            reasons.append(f"GPU {i}: retired pages pending a reset")
        xids = sorted(set(gpu.get("xid", [])) & critical)
        if xids:
            reasons.append(f"GPU {i}: Xid {', '.join(map(str, xids))}")
    text = "; ".join(reasons)
    return text if len(text) <= 255 else text[:252] + "..."


def _merged(stored: list[dict[str, Any]], gpus: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The new report, keeping the Xids of earlier ones (until an operator clears them)."""
    before = {g["index"]: g for g in stored if isinstance(g, dict) and "index" in g}
    out = []
    for gpu in sorted(gpus, key=lambda g: g["index"]):
        entry = {k: v for k, v in gpu.items() if k != "xid"}
        xids = list(dict.fromkeys([*before.get(gpu["index"], {}).get("xid", []), *gpu.get("xid", [])]))
        if xids:
            entry["xid"] = xids[-MAX_XIDS:]
        out.append(entry)
    return out


def node_gpu_health(*, node: Node, gpus: list[dict[str, Any]], now: datetime | None = None) -> str:
    """Store a heartbeat's GPU health and act on it; returns the node's health reason."""
    moment = now or timezone.now()
    with transaction.atomic():
        fresh = Node.objects.select_for_update().get(pk=node.pk)
        before = {g["index"]: g for g in fresh.gpu_health if isinstance(g, dict) and "index" in g}
        fresh.gpu_health = _merged(fresh.gpu_health, gpus)
        failing = sorted(g["index"] for g in gpus
                         if g.get("ecc_uncorrectable", 0) > before.get(g["index"], {}).get("ecc_uncorrectable", 0))
        asks = _failing_devices(fresh, failing) if failing else []
        _apply(fresh, judge(fresh, fresh.gpu_health), actor=None, why="")
        fresh.save(update_fields=["gpu_health", "health_reason", "state", "gpu_healthy", "device_mismatch"])
    for alloc_id, text in asks:  # each in its own transaction, after the node's lock is released
        _checkpoint_for_ecc(alloc_id, text, moment)
    return fresh.health_reason


def health_key(gpus: list[dict[str, Any]], limit: int) -> tuple[Any, ...]:
    """What of a report ``judge`` depends on under a temperature limit of ``limit``: per GPU its
    counters, flags and Xids, and which side of the limit it is on (not its degrees, which move
    every heartbeat). Two reports with one key are judged alike."""
    return tuple(sorted((g["index"], g.get("temperature_c", 0) > limit, g.get("ecc_uncorrectable", 0),
                         bool(g.get("retired_pending")), tuple(g.get("xid", ()))) for g in gpus
                        if isinstance(g, dict) and "index" in g))


def node_gpu_readings(*, node_id: int, gpus: list[dict[str, Any]]) -> int | None:
    """Store a report whose key (``health_key``) is the one last judged: only its readings moved,
    so there is nothing to judge and nothing to tell; one statement that keeps the stored Xids
    (as ``_merged`` does). Returns the node's temperature limit now (an operator may have changed
    it: the caller judges again), None where this cannot be done in one statement (SQLite; a
    report with Xids), which the caller then judges in full (``node_gpu_health``)."""
    if connection.vendor != "postgresql" or any("xid" in g for g in gpus):
        return None
    table = Node._meta.db_table
    with connection.cursor() as cur:
        cur.execute(
            f"UPDATE {table} AS n SET gpu_health = COALESCE((SELECT jsonb_agg(CASE WHEN old.e ? 'xid' "
            f"THEN new.e || jsonb_build_object('xid', old.e -> 'xid') ELSE new.e END ORDER BY (new.e ->> 'index')::int) "
            f"FROM jsonb_array_elements(%s::jsonb) AS new(e) LEFT JOIN jsonb_array_elements("
            f"CASE WHEN jsonb_typeof(n.gpu_health) = 'array' THEN n.gpu_health ELSE '[]'::jsonb END) AS old(e) "
            f"ON old.e -> 'index' = new.e -> 'index'), '[]'::jsonb) "
            f"WHERE n.id = %s RETURNING n.gpu_max_temperature_c", [orjson.dumps(gpus).decode(), node_id])
        row = cur.fetchone()
    return None if row is None else int(row[0])


def _apply(node: Node, reason: str, *, actor: Any, why: str) -> None:
    """Set ``node``'s health reason (not saved): Ready <-> Degraded as it appears or clears,
    audited and sent to the live feed when it changes."""
    if reason == node.health_reason:
        return
    before = {"health_reason": node.health_reason, "state": node.state}
    if reason and node.state == NodeState.READY:
        node.state = NodeState.DEGRADED
    elif not reason and node.state == NodeState.DEGRADED and node.last_heartbeat_at is not None and (
            node.last_heartbeat_at >= timezone.now() - timedelta(seconds=SILENT_S)):
        node.state = NodeState.READY  # heard from lately: its silence is not what degraded it
    node.health_reason = reason
    policy_change_record(actor=actor, action="gpu_health", target=node, before=before,
                         after={"health_reason": reason, "state": node.state},
                         reason=why or reason or "GPU health back within the thresholds")
    event_on_commit("node.health", {"node": node.name, "state": node.state,
                                    "reason": reason or "GPU health back within the thresholds"}, None)


def _failing_devices(node: Node, indices: list[int]) -> list[tuple[int, str]]:
    """Devices with new uncorrectable ECC errors: unhealthy from now on (no new work binds them),
    and the running work holding them, with what to tell it."""
    NodeDevice.objects.filter(node=node, index__in=indices).update(healthy=False)
    devices = list(NodeDevice.objects.filter(node=node).values("index", "healthy"))
    if devices:
        node.gpu_healthy = sum(1 for d in devices if d["healthy"])
        record_mismatch(node, mismatch_of(node.gpu, devices))
    asks = []
    for alloc_id, index, uuid in (PlacementDevice.objects.filter(node=node, index__in=indices)
                                  .values_list("placement__allocation_id", "index", "uuid").order_by("index")):
        asks.append((alloc_id, f"GPU {index} ({uuid}) on {node.name} reported an uncorrectable ECC error"))
    return asks


def _checkpoint_for_ecc(alloc_id: int, text: str, moment: datetime) -> None:
    """Ask running work on a failing GPU to checkpoint now: a failing device makes it worth it."""
    with transaction.atomic():
        alloc = (Allocation.objects.select_for_update(of=("self",)).select_related("resource_group")
                 .filter(pk=alloc_id).first())
        if alloc is None or alloc.state != State.RUNNING:
            return
        if alloc.checkpoint == "none":
            AllocationEvent.objects.create(allocation=alloc, from_state=alloc.state, to_state=alloc.state,
                                           reason=f"{text}; it cannot checkpoint and keeps running"[:255])
            return
        AllocationEvent.objects.create(allocation=alloc, from_state=alloc.state, to_state=alloc.state,
                                       reason=f"{text}: asked to checkpoint now"[:255])
        allocation_preempt(allocation=alloc, decision=None, action="checkpoint", now=moment,
                           checkpoint_timeout_s=policy_of(alloc.resource_group).checkpoint_timeout_minutes * 60)


def node_health_thresholds(*, node: Node, actor: Any, reason: str, **values: Any) -> Node:
    """An operator's thresholds for the node (any of THRESHOLDS), audited; the stored health is
    judged again under them at once."""
    with transaction.atomic():
        fresh = Node.objects.select_for_update().get(pk=node.pk)
        before = {k: getattr(fresh, k) for k in THRESHOLDS}
        for key, value in values.items():
            assert key in THRESHOLDS, key
            setattr(fresh, key, value)
        policy_change_record(actor=actor, action="gpu_thresholds", target=fresh, before=before,
                             after={k: getattr(fresh, k) for k in THRESHOLDS}, reason=reason)
        _apply(fresh, judge(fresh, fresh.gpu_health), actor=actor, why=reason)
        fresh.save(update_fields=[*THRESHOLDS, "health_reason", "state"])
    return fresh


def node_health_judge(*, node: Node, actor: Any, why: str) -> Node:
    """Judge the node's stored health again (its thresholds were edited elsewhere: the admin)."""
    with transaction.atomic():
        fresh = Node.objects.select_for_update().get(pk=node.pk)
        _apply(fresh, judge(fresh, fresh.gpu_health), actor=actor, why=why)
        fresh.save(update_fields=["health_reason", "state"])
    return fresh


def node_clear_xids(*, node: Node, actor: Any, reason: str) -> Node:
    """Forget the Xid events the node was told of (the operator has dealt with them), audited."""
    with transaction.atomic():
        fresh = Node.objects.select_for_update().get(pk=node.pk)
        before = [g for g in fresh.gpu_health if g.get("xid")]
        fresh.gpu_health = [{k: v for k, v in g.items() if k != "xid"} for g in fresh.gpu_health]
        policy_change_record(actor=actor, action="clear_xids", target=fresh, before={"gpus": before},
                             after={"gpus": []}, reason=reason)
        _apply(fresh, judge(fresh, fresh.gpu_health), actor=actor, why=reason)
        fresh.save(update_fields=["gpu_health", "health_reason", "state"])
    return fresh
