"""A node's GPUs as its agent reports them at hello: stored per node, compared with the
registered capacity. A difference is shown on the node page and written to the audit log; the
registered capacity is never changed by it. Fewer healthy GPUs than registered lower what the
scheduler sees (Node.gpu_healthy; the pass's snapshot takes the smaller)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from nodes.models import Node, NodeDevice
from scheduling.actions.policies import policy_change_record
from scheduling.dispatch import event_on_commit

FIELDS = ("index", "uuid", "model", "memory_mib", "healthy", "mig")


def mismatch_of(registered: int, devices: list[dict[str, Any]]) -> str:
    """How the reported GPUs differ from the registered count ("" when they agree)."""
    healthy = sum(1 for d in devices if d.get("healthy", True))
    if len(devices) == registered and healthy == registered:
        return ""
    return (f"agent reports {len(devices)} GPU(s), {healthy} healthy; {registered} registered"
            + ("; new work uses only the healthy ones" if healthy < registered else ""))


def node_devices_report(*, node: Node, devices: list[dict[str, Any]] | None, cgroups: bool | None,
                        now: datetime, cgroups_note: str = "") -> None:
    """Store what a hello said of the node's GPUs (``node`` locked by the caller, saved here).
    None: an agent that does not report devices; they are unknown and nothing is bound."""
    fields = ["gpu_healthy", "devices_reported_at", "device_mismatch", "cgroups", "cgroups_note"]
    node.cgroups, node.cgroups_note = cgroups, cgroups_note[:255]
    if devices is None:
        NodeDevice.objects.filter(node=node).delete()
        node.gpu_healthy, node.devices_reported_at, mismatch = None, None, ""
    else:
        wanted = [tuple(_row(d)[f] for f in FIELDS) for d in sorted(devices, key=lambda d: d["index"])]
        stored = list(NodeDevice.objects.filter(node=node).order_by("index").values_list(*FIELDS))
        if [tuple(r) for r in stored] != wanted:
            NodeDevice.objects.filter(node=node).delete()
            NodeDevice.objects.bulk_create([NodeDevice(node=node, **_row(d)) for d in devices])
        node.gpu_healthy = sum(1 for d in devices if d.get("healthy", True))
        node.devices_reported_at = now
        mismatch = mismatch_of(node.gpu, devices)
    record_mismatch(node, mismatch)
    node.save(update_fields=fields)


def record_mismatch(node: Node, mismatch: str) -> None:
    """Set the node's device mismatch (not saved), audited and sent live when it changes."""
    if mismatch[:255] != node.device_mismatch:
        policy_change_record(actor=None, action="device_mismatch", target=node,
                             before={"device_mismatch": node.device_mismatch},
                             after={"device_mismatch": mismatch},
                             reason=mismatch or "reported GPUs agree with the registered capacity")
        event_on_commit("node.devices", {"node": node.name, "mismatch": mismatch}, None)
    node.device_mismatch = mismatch[:255]


def _row(device: dict[str, Any]) -> dict[str, Any]:
    return {"index": device["index"], "uuid": device["uuid"], "model": device.get("model", ""),
            "memory_mib": device.get("memory_mib", 0), "healthy": device.get("healthy", True),
            "mig": device.get("mig", [])}
