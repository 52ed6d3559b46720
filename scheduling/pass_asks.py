"""Asking for a resource group's scheduling pass after a change, once per burst.

With a broker, an ask sets a mark per group in Redis (``SET NX`` with a short expiry) and sends
the pass's Celery message only if it set the mark; the pass deletes the mark before it reads
anything (``pass_starting``). An ask that finds the mark committed before the mark's pass reads,
so a burst of submissions, cancels or releases sends one message and every change is still read
by a pass that starts after it. Without Redis, or with tasks run eagerly (the embedded mode),
every ask sends (runs) its own pass.

Dispatch's helpers are called through the module, so that what patches them (tests) applies here.
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.db import transaction

from scheduling import dispatch

log = logging.getLogger(__name__)

PASS_ASKED_TTL_S = 2.0  # a mark whose pass never started (its message lost) stops coalescing after this


def request_pass_on_commit(group_id: int) -> None:
    """Ask for a scheduler pass of the group once the transaction commits.

    With a broker, asks made while an earlier one's pass has not yet started share its message
    (``pass_asked``): a burst of submissions sends one message, not one each, and every commit is
    still read by a pass that starts after it. Without one (tasks run eagerly), every ask runs its
    pass, as before."""
    if settings.CELERY_TASK_ALWAYS_EAGER or dispatch._redis() is None:
        dispatch.task_on_commit(dispatch.SCHEDULE_PASS, group_id)
        return
    transaction.on_commit(lambda: _ask_pass(group_id))


def _pass_asked_key(group_id: int) -> str:
    """Set while a pass of the group has been asked for and has not started; per database, since
    group ids are."""
    return f"lattice:pass-asked:{settings.DATABASES['default']['NAME']}:{group_id}"


def _mark_pass(client: Any, group_id: int) -> Any:
    """Set the group's pass mark unless it is set (on a client: whether this call set it)."""
    return client.set(_pass_asked_key(group_id), b"1", nx=True, px=int(PASS_ASKED_TTL_S * 1000))


def _ask_pass(group_id: int) -> None:
    """After commit: send the pass's message unless one sent earlier is still waiting for its pass
    to start. A mark seen here was set before this commit's ask and is cleared by ``pass_starting``
    before that pass reads anything, so that pass reads this commit. A message that could not be
    sent takes its mark with it; one lost after sending leaves it to lapse (PASS_ASKED_TTL_S), and
    the periodic sweep runs every group's pass meanwhile."""
    try:
        if not _mark_pass(dispatch._redis(), group_id):
            return
    except Exception:  # without the mark, send anyway: never a commit without its pass
        log.warning("could not mark the pass of group %s as asked", group_id, exc_info=True)
    _send_pass(group_id)


def _send_pass(group_id: int) -> None:
    """The pass's message; if the broker refuses it, its mark goes too (the next ask sends again)."""
    try:
        dispatch._task(dispatch.SCHEDULE_PASS).delay(group_id)
    except Exception:  # broker down: the periodic sweep does the same work
        log.warning("could not enqueue %s", dispatch.SCHEDULE_PASS, exc_info=True)
        try:
            dispatch._redis().delete(_pass_asked_key(group_id))
        except Exception:  # it lapses on its own
            log.warning("could not clear the pass mark of group %s", group_id, exc_info=True)


def pass_starting(group_id: int) -> None:
    """Called by a pass before it reads anything: asks committed from now on send a message of
    their own (this pass may not see them). Failing to clear the mark leaves it to lapse."""
    client = dispatch._redis()
    if client is None:
        return
    try:
        client.delete(_pass_asked_key(group_id))
    except Exception:
        log.warning("could not clear the pass mark of group %s", group_id, exc_info=True)


def event_and_pass_on_commit(kind: str, payload: dict[str, Any], tenant_id: int | None, group_id: int) -> None:
    """``event_on_commit``, then ``request_pass_on_commit``: with a broker, one round trip to Redis."""
    if settings.CELERY_TASK_ALWAYS_EAGER or dispatch._redis() is None:
        dispatch.event_on_commit(kind, payload, tenant_id)
        request_pass_on_commit(group_id)
        return
    events = [(kind, payload, tenant_id)]

    def send() -> None:
        targets = dispatch._targets(events)
        seen, marked = _watched_and_marked(sorted({g for groups in targets for g in groups}), group_id)
        try:
            dispatch._send_events(events, targets, seen)
        finally:
            if marked:
                _send_pass(group_id)

    transaction.on_commit(send)


def _watched_and_marked(groups: list[str], group_id: int) -> tuple[set[str], bool]:
    """``watched(groups)`` and whether this ask set the group's pass mark (``_ask_pass``), in one
    round trip; if Redis fails, every group counts as watched and the mark as set by this ask."""
    try:
        with dispatch._redis().pipeline(transaction=False) as pipe:
            dispatch._count_watchers(pipe, groups)
            _mark_pass(pipe, group_id)
            *counts, marked = pipe.execute()
    except Exception:  # never lose an event or a pass
        log.warning("could not read the watchers or mark the pass of group %s", group_id, exc_info=True)
        return set(groups), True
    return dispatch._watched_of(groups, counts), bool(marked)
