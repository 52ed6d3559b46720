"""Side effects, always after commit: agent commands, live events, tasks.

Tasks are asked for by name (actions never import the task module, which imports them), agent
commands are the typed frames of nodes/protocol.py. Group names are built here and only here. Nothing is sent from inside a
transaction that might roll back; a message lost after commit is recovered by
the periodic sweep, which re-derives what must happen from the database.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import socket
import threading
import time
import uuid
from typing import Any

import redis
from asgiref.sync import async_to_sync, sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import connections, transaction

from lattice_site.celery import app
from nodes.protocol import Command, encode

log = logging.getLogger(__name__)


def agent_group(node_name: str) -> str:
    return f"agent.{node_name}"


def tenant_group(tenant_id: int) -> str:
    return f"tenant-{tenant_id}"


def user_group(user_id: int) -> str:
    """Every live-feed socket of one user: told to re-check its access when that may have changed."""
    return f"user-{user_id}"


OPS_GROUP = "ops"
SUBSCRIBERS_TTL_S = 30  # a process's watcher entry lapses this long after its last refresh
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
    """Count a live subscriber in or out of ``group`` (browsers only: agents always get commands).

    The count is this process's; Redis holds, per group, which processes have one (see
    ``_watchers_key``), each entry expiring unless the process keeps it alive
    (``keep_watchers_alive``): a process killed with its sockets open leaves nothing behind for
    long, and a live one never lapses."""
    with _watch_lock:
        before = _local_subscribers.get(group, 0)
        after = _local_subscribers[group] = max(0, before + delta)
        client = _redis()
        if client is None or (before > 0) == (after > 0):
            return
        try:
            if after > 0:
                _watchers_add(client, [group])
            else:
                client.zrem(_watchers_key(group), _process_id())
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
        with client.pipeline(transaction=False) as pipe:
            _count_watchers(pipe, groups)
            counts = pipe.execute()
    except Exception:  # without the counts, events are sent anyway: never lose one
        return set(groups)
    return _watched_of(groups, counts)


def _count_watchers(pipe: Any, groups: list[str]) -> None:
    """Queue on ``pipe`` the count of each group's live watchers (those not yet lapsed)."""
    now = time.time()
    for g in groups:
        pipe.zcount(_watchers_key(g), now, "+inf")


def _watched_of(groups: list[str], counts: list[Any]) -> set[str]:
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


def agent_revoked_on_commit(node_name: str, tokens: list[int] | None = None) -> None:
    """Once the transaction commits, close the node's agent connections that authenticated with a
    token since revoked (4401), in whichever process holds them: every token of the node, or only
    those with the ids ``tokens`` (a connection made with another token of the node stays)."""
    message: dict[str, Any] = {"type": "agent.revoked"}
    if tokens is not None:
        message["tokens"] = list(tokens)
    transaction.on_commit(lambda: _send_all([(agent_group(node_name), message)],
                                            f"token revocation of {node_name}"))


def live_recheck_on_commit(user_id: int) -> None:
    """Once the transaction commits, make the user's live-feed sockets, in whichever process holds
    them, re-check their session and tenants (after a logout, a removal or a deactivation)."""
    transaction.on_commit(lambda: _send_all([(user_group(user_id), {"type": "live.recheck"})],
                                            f"live access re-check of user {user_id}"))


def event_on_commit(kind: str, payload: dict[str, Any], tenant_id: int | None) -> None:
    """A live event for operators (and the tenant it concerns), sent after commit."""
    events_on_commit([(kind, payload, tenant_id)])


def events_on_commit(events: list[tuple[str, dict[str, Any], int | None]]) -> None:
    """Live events (kind, payload, tenant id or None), sent in order after commit in one go: one
    check of who watches, one event-loop hop, nothing for unwatched groups."""
    if not events:
        return

    def send() -> None:
        targets = _targets(events)
        _send_events(events, targets, watched(sorted({g for groups in targets for g in groups})))

    transaction.on_commit(send)


def _targets(events: list[tuple[str, dict[str, Any], int | None]]) -> list[list[str]]:
    return [[OPS_GROUP] + ([tenant_group(t)] if t is not None else []) for _, _, t in events]


def _send_events(events: list[tuple[str, dict[str, Any], int | None]], targets: list[list[str]],
                 seen: set[str]) -> None:
    """Send each event to those of its groups in ``seen`` (the watched ones)."""
    heard = [(event, groups) for event, groups in zip(events, targets, strict=True) if seen.intersection(groups)]
    if not heard:
        return  # no one watches: no words to read
    # A tenant's group reads what REST would show it (other tenants' victims counted, not named,
    # and no other tenant's name); operators read each allocation's group, tenant and size.
    # (Imported here: the reads sit above dispatch in the layers and import the actions' models.)
    from scheduling.live_feed import live_payloads

    shown = live_payloads([event for event, _ in heard], bool(seen - {OPS_GROUP}))
    _send_all([(group, {"type": "live.event", "group": group,
                         "event": {"kind": kind, **(ops if group == OPS_GROUP else mine)}})
               for ((kind, _, _), groups), (ops, mine) in zip(heard, shown, strict=True)
               for group in groups if group in seen], f"{len(events)} live events")


SCHEDULE_PASS = "scheduling.schedule_resource_group"
DEADLINES = "scheduling.preemption_deadlines"


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


def background_task_on_commit(name: str, *args: Any) -> None:
    """Send the long task ``name`` once the transaction commits. With a broker it goes to a worker
    as any task; without one (the embedded mode) it runs in a thread of this process instead of in
    the request that asked for it, so the page that asked can show its progress."""
    if not settings.CELERY_TASK_ALWAYS_EAGER:
        task_on_commit(name, *args)
        return

    def run() -> None:
        try:
            _task(name).apply(args=args)
        except Exception:  # the task records its own failure; this only keeps the thread quiet
            log.exception("background task %s failed", name)
        finally:
            connections.close_all()  # this thread's own connections

    transaction.on_commit(lambda: threading.Thread(target=run, name=f"task-{name}", daemon=True).start())


# -- who watches the live feed, per process (subscribe and watched above) ---------------------
_watch_lock = threading.Lock()
_BOOT = uuid.uuid4().hex[:8]
_keepers: dict[int, asyncio.Task[None]] = {}


def _watchers_key(group: str) -> str:
    """A sorted set: one member per process with a subscriber of ``group``, scored by the time
    (seconds since the epoch) the entry lapses unless refreshed."""
    return f"lattice:subscribers:{group}"


def _process_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{_BOOT}"


def _watchers_add(client: Any, groups: list[str]) -> None:
    """Enter (or refresh) this process for ``groups``; drop entries that lapsed; and let a key
    whose every process is gone expire as a whole."""
    now = time.time()
    member = _process_id()
    with client.pipeline(transaction=False) as pipe:
        for group in groups:
            key = _watchers_key(group)
            pipe.zadd(key, {member: now + SUBSCRIBERS_TTL_S})
            pipe.zremrangebyscore(key, "-inf", now)
            pipe.expire(key, int(SUBSCRIBERS_TTL_S) + 1)
        pipe.execute()


def refresh_watchers() -> bool:
    """Push this process's entries forward; returns whether it has subscribers at all."""
    with _watch_lock:
        groups = sorted(g for g, n in _local_subscribers.items() if n > 0)
        client = _redis()
        if groups and client is not None:
            try:
                _watchers_add(client, groups)
            except Exception:  # retried at the next beat, well before the entries lapse
                log.warning("could not refresh the live feed's watchers", exc_info=True)
    return bool(groups)


def keep_watchers_alive() -> None:
    """Called by a live-feed consumer once subscribed: make sure this event loop runs the beat that
    refreshes the process's watcher entries (a third of their life apart) while it has any."""
    if _redis() is None:
        return  # counts live in this process alone
    loop = asyncio.get_running_loop()
    task = _keepers.get(id(loop))
    if task is None or task.done() or task.get_loop() is not loop:  # (a closed loop's id is reused)
        _keepers[id(loop)] = loop.create_task(_beat(id(loop)))


async def _beat(loop_id: int) -> None:
    try:
        while True:
            await asyncio.sleep(SUBSCRIBERS_TTL_S / 3)
            if not await sync_to_async(refresh_watchers, thread_sensitive=False)():
                return
    finally:
        _keepers.pop(loop_id, None)
