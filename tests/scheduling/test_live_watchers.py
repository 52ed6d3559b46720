"""Who watches the live feed, counted across processes in Redis: never deaf, never stale.

A process counts itself in for each group one of its sockets watches, with an
expiry it keeps pushing forward while it lives; a process that dies stops, and
its entry lapses.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async

from scheduling import dispatch
from tests.conftest import ROOT
from tests.scheduling.test_live import _comm, _events, no_subscribers  # noqa: F401  (autouse fixture)

pytestmark = [pytest.mark.redis, pytest.mark.django_db(transaction=True)]

TTL_S = 2


def test_a_connected_watcher_hears_events_long_past_the_count_s_expiry(client, operator, monkeypatch):
    monkeypatch.setattr(dispatch, "SUBSCRIBERS_TTL_S", TTL_S)
    client.force_login(operator)

    async def scenario():
        ops = _comm(client)
        assert (await ops.connect(timeout=10))[0]
        await ops.receive_json_from(timeout=5)  # hello
        await asyncio.sleep(2 * TTL_S + 0.5)
        await database_sync_to_async(lambda: dispatch.event_on_commit("late", {"n": 1}, None))()
        got = await _events(ops, 1)
        await ops.disconnect()
        return got

    assert async_to_sync(scenario)() == [{"kind": "late", "n": 1}]
    assert not dispatch.has_subscribers("ops")  # the one socket closed


WATCHER = f"""
import sys, time, django
django.setup()
from scheduling import dispatch
dispatch.SUBSCRIBERS_TTL_S = {TTL_S}
dispatch.subscribe(sys.argv[1], +1)
print("subscribed", flush=True)
time.sleep(600)
"""


def test_a_killed_process_s_watchers_lapse_on_their_own():
    """A Daphne killed with its sockets open leaves no count behind past the expiry."""
    group = "tenant-killed"
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "lattice_site.settings.test"}
    proc = subprocess.Popen([sys.executable, "-c", WATCHER, group], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "subscribed"
        assert dispatch.has_subscribers(group)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        killed_at = time.monotonic()
        while dispatch.has_subscribers(group) and time.monotonic() < killed_at + 3 * TTL_S:
            time.sleep(0.1)
        assert not dispatch.has_subscribers(group)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
