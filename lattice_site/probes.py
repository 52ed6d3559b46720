"""Probes for load balancers and orchestrators, answered before any other middleware.

``/healthz/live``: the process answers (nothing else is checked: restarting it would not help a
database outage). ``/healthz/ready``: it can serve: the database answers, every migration is
applied, and Redis answers when REDIS_URL is set; else 503 naming the check that failed.
``/healthz`` is the same as ready (it checked the database before the split). Each answers with
or without a trailing slash, as probes are written both ways.

This middleware comes first, so a probe is never redirected to HTTPS (a plain-HTTP probe from
inside the network) nor refused by ALLOWED_HOSTS (a Kubernetes probe sends the pod's IP as its
Host), as Django's deployment checklist suggests; every other path still is.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import cache

import redis
from django.conf import settings
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.http import HttpRequest, HttpResponse, JsonResponse

log = logging.getLogger(__name__)
_migrated = False  # once every migration is applied, it stays so for this process


def live() -> dict[str, str]:
    return {}


def ready() -> dict[str, str]:
    checks = {"database": _check(_database)}
    if checks["database"] == "ok":
        checks["migrations"] = _check(_migrations)
    if settings.REDIS_URL:
        checks["redis"] = _check(_redis)
    return checks


def _check(probe: Callable[[], None]) -> str:
    try:
        probe()
    except Exception as exc:  # any failure means "not ready"; the details go to the log, not the prober
        log.warning("readiness: %s failed: %s", probe.__name__.strip("_"), exc)
        return "failed"
    return "ok"


def _database() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")


class Unmigrated(Exception):
    pass


def _migrations() -> None:
    global _migrated
    if _migrated:
        return
    executor = MigrationExecutor(connection)
    pending = executor.migration_plan(executor.loader.graph.leaf_nodes())
    if pending:
        raise Unmigrated(f"{len(pending)} migrations not applied, first {pending[0][0]}")
    _migrated = True


@cache
def _redis_client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=1)


def _redis() -> None:
    _redis_client(settings.REDIS_URL).ping()


PROBES: dict[str, Callable[[], dict[str, str]]] = {"/healthz": ready, "/healthz/ready": ready, "/healthz/live": live}


class ProbeMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        path = request.path_info
        probe = PROBES.get(path[:-1] if path.endswith("/") else path)
        if probe is None:
            return self.get_response(request)
        if request.method not in ("GET", "HEAD"):
            return HttpResponse(status=405, headers={"Allow": "GET, HEAD"})
        checks = probe()
        ok = all(value == "ok" for value in checks.values())
        return JsonResponse({"status": "ok" if ok else "unavailable", "checks": checks}, status=200 if ok else 503,
                            headers={"Cache-Control": "no-store"})
