"""Side effects, always after commit: agent commands, live events, tasks.

Tasks are asked for by name (actions never import the task module, which imports them), agent
commands are the typed frames of nodes/protocol.py. Group names are built here and only here. Nothing is sent from inside a
transaction that might roll back; a message lost after commit is recovered by
the periodic sweep, which re-derives what must happen from the database.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

import redis
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import transaction

from lattice_site.celery import app
from nodes.protocol import Command, encode

log = logging.getLogger(__name__)


def agent_group(node_name: str) -> str:
    return f"agent.{node_name}"


def tenant_group(tenant_id: int) -> str:
    return f"tenant-{tenant_id}"


OPS_GROUP = "ops"
SUBSCRIBERS_TTL_S = 24 * 3600
_local_subscribers: dict[str, int] = {}


def _redis() -> Any:
    if not settings.REDIS_URL:
        return None
    return _redis_client(settings.REDIS_URL)


@functools.cache
def _redis_client(url: str) -> Any:
    """One client (and connection pool) per process and URL, shared by threads."""
    return redis.Redis.from_url(url, socket_timeout=2)


def subscribe(group: str, delta: int) -> None:
    """Count a live subscriber in or out of ``group`` (browsers only: agents always get commands)."""
    client = _redis()
    if client is None:
        _local_subscribers[group] = max(0, _local_subscribers.get(group, 0) + delta)
        return
    key = f"lattice:subscribers:{group}"
    try:
        if client.incrby(key, delta) <= 0:
            client.delete(key)
        else:
            client.expire(key, SUBSCRIBERS_TTL_S)
    except Exception:  # without the count, events are sent anyway: never lose one
        log.warning("could not count subscribers of %s", group, exc_info=True)


def has_subscribers(group: str) -> bool:
    return group in watched([group])


def watched(groups: list[str]) -> set[str]:
    """Those of ``groups`` with a live subscriber, in one round trip (all of them if unknown)."""
    client = _redis()
    if client is None:
        return {g for g in groups if _local_subscribers.get(g, 0) > 0}
    try:
        counts = client.mget([f"lattice:subscribers:{g}" for g in groups])
    except Exception:  # without the counts, events are sent anyway: never lose one
        return set(groups)
    return {g for g, n in zip(groups, counts, strict=True) if int(n or 0) > 0}


def _send_all(messages: list[tuple[str, dict[str, Any]]], what: str) -> None:
    """Send (group, message) pairs in order, in one event-loop hop. Never fails the caller: what
    is lost is re-derived (agents' commands by the sweep and their hello; pages read the database
    on load, so a lost live event is only late)."""
    if not messages:
        return

    async def send_all() -> None:
        layer = get_channel_layer()
        if layer is None:
            return
        for group, message in messages:
            await layer.group_send(group, message)

    try:
        async_to_sync(send_all)()
    except Exception:
        log.warning("could not send %s", what, exc_info=True)


def agent_command_on_commit(node_name: str, command: Command) -> None:
    """Queue a command for the node's agent, sent once the transaction commits."""
    agent_commands_on_commit([(node_name, command)])


def agent_commands_on_commit(commands: list[tuple[str, Command]]) -> None:
    """Many commands, sent after commit in one go (one event-loop hop, not one per frame)."""
    if not commands:
        return
    messages = [(agent_group(node_name), {"type": "agent.command", "frame": encode(command)})
                for node_name, command in commands]
    transaction.on_commit(lambda: _send_all(messages, f"{len(messages)} agent commands"))


def agent_revoked_on_commit(node_name: str) -> None:
    """Once the transaction commits, close the node's agent connections that authenticated with a
    token since revoked (4401), in whichever process holds them."""
    transaction.on_commit(lambda: _send_all([(agent_group(node_name), {"type": "agent.revoked"})],
                                            f"token revocation of {node_name}"))


def event_on_commit(kind: str, payload: dict[str, Any], tenant_id: int | None) -> None:
    """A live event for operators (and the tenant it concerns), sent after commit."""
    events_on_commit([(kind, payload, tenant_id)])


def events_on_commit(events: list[tuple[str, dict[str, Any], int | None]]) -> None:
    """Live events (kind, payload, tenant id or None), sent in order after commit in one go: one
    check of who is watching for all of them, one event-loop hop, nothing for unwatched groups."""
    if not events:
        return

    def send() -> None:
        targets = [[OPS_GROUP] + ([tenant_group(t)] if t is not None else []) for _, _, t in events]
        seen = watched(sorted({g for groups in targets for g in groups}))
        # A tenant's group reads what REST would show it (other tenants' victims counted, not named).
        from scheduling.selectors import live_for_tenants

        shown = live_for_tenants(events) if seen - {OPS_GROUP} else [p for _, p, _ in events]
        _send_all([(group, {"type": "live.event", "event": {"kind": kind, **(payload if group == OPS_GROUP
                                                                            else tenant_payload)}})
                   for (kind, payload, _), tenant_payload, groups in zip(events, shown, targets, strict=True)
                   for group in groups if group in seen], f"{len(events)} live events")

    transaction.on_commit(send)


SCHEDULE_PASS = "scheduling.schedule_resource_group"
DEADLINES = "scheduling.preemption_deadlines"


def request_pass_on_commit(group_id: int) -> None:
    """Ask for a scheduler pass of the group once the transaction commits."""
    task_on_commit(SCHEDULE_PASS, group_id)


def _task(name: str) -> Any:
    """The registered task of that name (the worker has imported the task modules; a web process
    imports them the first time it asks)."""
    if name not in app.tasks:
        app.loader.import_default_modules()
    return app.tasks[name]


def task_on_commit(name: str, *args: Any, countdown: float | None = None) -> None:
    """Send the task ``name`` once the transaction commits (now, or after ``countdown`` s)."""
    if countdown is not None and settings.CELERY_TASK_ALWAYS_EAGER:
        # Eager mode cannot wait; deadlines are then kept by the periodic sweep alone.
        return

    def enqueue() -> None:
        try:
            task = _task(name)
            if countdown is None:
                task.delay(*args)
            else:
                task.apply_async(args=args, countdown=countdown)
        except Exception:  # broker down: the periodic sweep does the same work
            log.warning("could not enqueue %s", name, exc_info=True)

    transaction.on_commit(enqueue)
