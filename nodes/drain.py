"""An operator's drain and undrain of a node, each audited. A drain is the operator's to end:
silence and return never undrain a node (nodes/actions.py, liveness)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import Case, Q, Value, When
from django.utils import timezone

from nodes.actions import HEARTBEAT_TIMEOUT_S
from nodes.heartbeats import nodes_changed
from nodes.models import Node, NodeState
from scheduling.actions.policies import policy_change_record


def node_drain(*, node: Node, actor: Any, reason: str) -> Node:
    with transaction.atomic():
        before = {"state": node.state}
        # (a drained node stays drained: nothing runs there to wait for)
        Node.objects.filter(pk=node.pk).exclude(state=NodeState.DRAINED).update(state=NodeState.DRAINING)
        node.refresh_from_db()
        nodes_changed([node.pk])
        policy_change_record(actor=actor, action="drain", target=node, before=before, after={"state": node.state},
                             reason=reason)
    return node


def node_undrain(*, node: Node, actor: Any, reason: str, now: datetime | None = None) -> Node:
    """Back to what its agent says: ready only if heard within the heartbeat timeout and healthy;
    Degraded when silent or its GPUs unhealthy (liveness takes it on from there); Unknown if never heard.
    A node that is not drained is left as it is, and no audit entry says otherwise."""
    heard = (now or timezone.now()) - timedelta(seconds=HEARTBEAT_TIMEOUT_S)
    with transaction.atomic():
        # What it is now, not what the caller read (another request may have drained it since).
        before = {"state": Node.objects.select_for_update().values_list("state", flat=True).get(pk=node.pk)}
        changed = Node.objects.filter(pk=node.pk, state__in=[NodeState.DRAINING, NodeState.DRAINED]).update(
            state=Case(When(last_heartbeat_at__isnull=True, then=Value(NodeState.UNKNOWN)),
                       When(Q(last_heartbeat_at__lt=heard) | ~Q(health_reason=""), then=Value(NodeState.DEGRADED)),
                       default=Value(NodeState.READY)))
        node.refresh_from_db()
        if not changed:
            return node  # it was not drained: nothing changed, nothing to audit
        nodes_changed([node.pk])
        policy_change_record(actor=actor, action="undrain", target=node, before=before,
                             after={"state": node.state}, reason=reason)
    return node
