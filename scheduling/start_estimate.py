"""When pending work is expected to start (Slurm's ``squeue --start``), for the job page and explain.

A group's estimates come from one forward replay of its whole queue (``replay.estimate``): the
pass's own order (``pass_order``), its snapshot and its policy, running work ending at its
walltime. They are kept in Django's cache (Redis when ``REDIS_URL`` is set, shared by every
process; else each process's memory) for ``CACHE_SECONDS`` under ``start-estimate:<group id>``,
so a group's queue is replayed at most once a minute however often its jobs are read.

The cached document holds every pending request's estimate; each reader is given only the
estimate of the job it may see (the callers check that), never another's: other tenants' work
is counted in the replay, never named.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.utils import timezone

from scheduling.models import Allocation, ResourceGroup
from scheduling.passes.holds import holds_of
from scheduling.passes.queue import pass_order
from scheduling.passes.snapshot import engine_allocation, load_snapshot
from scheduling.replay.estimate import ASSUMPTIONS, estimate_starts

CACHE_SECONDS = 60
LOCK_SECONDS = 30  # a computing reader that died frees the lock after this
WAIT_S = 5.0  # how long another reader waits for the document being computed


def _key(group: ResourceGroup) -> str:
    return f"start-estimate:{group.pk}"


def group_estimates(group: ResourceGroup) -> dict[str, Any]:
    """``computed_at`` (epoch seconds), ``default_walltime_minutes`` and ``starts`` (request id as
    text -> epoch seconds, or None past the horizon): from the cache when at most a minute old.
    One reader computes a missing document (a lock in the cache); the others wait for it up to
    ``WAIT_S`` rather than each replaying the whole queue at once."""
    key = _key(group)
    doc = cache.get(key)
    if doc is not None:
        return doc
    if cache.add(f"{key}:computing", 1, LOCK_SECONDS):
        try:
            doc = _compute(group, timezone.now())
            cache.set(key, doc, CACHE_SECONDS)
        finally:
            cache.delete(f"{key}:computing")
        return doc
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        time.sleep(0.05)
        doc = cache.get(key)
        if doc is not None:
            return doc
    return _compute(group, timezone.now())  # the computing reader is slow or gone: not stored


def _compute(group: ResourceGroup, now: datetime) -> dict[str, Any]:
    snap = load_snapshot(group)
    holds = holds_of(group)
    rows = pass_order(group, snap.policy.kind, now=now, snap=snap)  # one snapshot for the order and the replay
    pending = [engine_allocation(r, held=tuple(holds.get(r["id"], ()))) for r in rows]
    minutes = settings.LATTICE_ESTIMATE_DEFAULT_WALLTIME_MINUTES
    starts = estimate_starts(snap.cluster, snap.policy, pending, now.timestamp(), default_walltime_s=minutes * 60.0)
    return {"computed_at": now.timestamp(), "default_walltime_minutes": minutes,
            "starts": {str(pk): at for pk, at in starts.items()}}


def start_estimate(alloc: Allocation) -> dict[str, Any] | None:
    """The estimate of one pending allocation, with its assumptions; None when it is not pending.
    ``estimated_start`` is None when the pass passes it over now (held, waiting on a dependency,
    past its array's throttle) or when it would not start within the replay's horizon."""
    if alloc.state != "pending":
        return None
    doc = group_estimates(alloc.resource_group)
    at = doc["starts"].get(str(alloc.pk))
    computed = doc["computed_at"]
    minutes = doc["default_walltime_minutes"]
    default = f"{minutes:g} minutes" if minutes < 120 else f"{minutes / 60:g} hours"
    in_queue = str(alloc.pk) in doc["starts"]
    if in_queue:
        missing = None
    elif alloc.submitted_at.timestamp() > computed:
        missing = "it was submitted after this estimate was made: the next one, within a minute, includes it"
    else:
        missing = "it is not in the queue yet"  # held, waiting on a dependency, past its array's throttle
    return {
        "estimated_start": _iso(at) if at is not None else None,
        # From now, not from when the estimate was made (it may be up to a minute old).
        "in_s": round(max(0.0, at - timezone.now().timestamp())) if at is not None else None,
        "in_queue": in_queue,
        "not_estimated": missing,
        "computed_at": _iso(computed),
        "recomputed_every_s": CACHE_SECONDS,
        "assumptions": ASSUMPTIONS.format(default=default),
    }


def _iso(at: float) -> str:
    return datetime.fromtimestamp(at, tz=UTC).isoformat().replace("+00:00", "Z")
