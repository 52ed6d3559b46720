"""What each live-feed event says in words: the allocations it names, with their group, tenant and
size, read in one query for a whole batch of events (after commit, only when someone watches).

Operators get every allocation named. A tenant's group gets the payload REST would show it
(scheduling/selectors.py: another tenant's victims counted, not named) and only its own
allocations' details: another tenant's name never reaches it.
"""

from __future__ import annotations

from typing import Any

from scheduling.models import Allocation
from scheduling.selectors import candidate_allocation, live_for_tenants

Event = tuple[str, dict[str, Any], int | None]


def _named(payload: dict[str, Any]) -> list[int]:
    ids = [payload.get("allocation"), payload.get("preemptor"), *(payload.get("allocations") or ()),
           *(payload.get("victims") or ())]
    return [pk for pk in (candidate_allocation(i) for i in ids if i is not None) if pk is not None]


def _details(events: list[Event]) -> dict[int, dict[str, Any]]:
    ids = sorted({pk for _, payload, _ in events for pk in _named(payload)})
    if not ids:
        return {}
    rows = Allocation.objects.filter(pk__in=ids).values_list(
        "pk", "tenant_id", "tenant__name", "resource_group__name", "node_count", "per_node_gpu")
    return {pk: {"tenant_id": tid, "tenant": name, "group": group, "nodes": nodes, "gpus": gpus}
            for pk, tid, name, group, nodes, gpus in rows}


def _jobs(payload: dict[str, Any], details: dict[int, dict[str, Any]], tenant: int | None) -> dict[str, Any]:
    out = {}
    for pk in _named(payload):
        row = details.get(pk)
        if row is not None and (tenant is None or row["tenant_id"] == tenant):
            out[str(pk)] = {k: v for k, v in row.items() if k != "tenant_id"}
    return out


def live_payloads(events: list[Event], tenants_watch: bool) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Per event, (the operators' payload, its tenant's payload), each with ``jobs``: the details
    of the allocations it names that the reader may see."""
    details = _details(events)
    shown = live_for_tenants(events) if tenants_watch else [p for _, p, _ in events]
    out = []
    for (_, payload, tenant), redacted in zip(events, shown, strict=True):
        if not _named(payload):  # names no allocation: nothing to add
            out.append((payload, redacted))
            continue
        ops = {**payload, "jobs": _jobs(payload, details, None)}
        mine = ({**redacted, "jobs": _jobs(redacted, details, tenant)} if tenant is not None and tenants_watch
                else ops)
        out.append((ops, mine))
    return out
