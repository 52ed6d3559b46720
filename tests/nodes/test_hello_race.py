"""Agents of one multi-node allocation reconnect at the same time (a fleet restart).

Each agent's hello finds the allocation missing from what it runs and declares it
lost; the two transactions race on the allocation's row. The one that loses must
still welcome its agent and reconcile the rest, not roll the whole hello back.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from django.db import connection, connections, transaction
from django.utils import timezone

from nodes.actions import node_hello
from nodes.protocol import Hello
from scheduling.models import Allocation, AllocationEvent, Placement

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def _hello(frame_id: str) -> Hello:
    return Hello(id=frame_id, agent_version="1.0", capacity={}, labels={}, running=[])


def _waiting_on_a_lock() -> bool:
    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                    "AND wait_event_type = 'Lock'")
        return bool(cur.fetchone()[0])


def test_concurrent_hellos_of_one_allocation_s_nodes_both_succeed(two_nodes, make_allocation, vcluster_hpc):
    a, b = two_nodes
    before = timezone.now() - timedelta(minutes=5)
    for node in two_nodes:
        node.last_heartbeat_at = before
        node.save()
    job = make_allocation(state="running", node_count=2, per_node_gpu=8, vcluster=vcluster_hpc,
                          started_at=before - timedelta(minutes=1), ran_on=["gpu-a", "gpu-b"],
                          requeue_policy="on_node_failure")
    for node in two_nodes:
        Placement.objects.create(allocation=job, node=node, gpu=8)

    held, release = threading.Event(), threading.Event()
    results: dict[str, object] = {}

    def first() -> None:
        try:
            with transaction.atomic():  # a's hello has failed the job but not yet committed
                results["a"] = node_hello(node=a, frame=_hello("ha"))
                held.set()
                release.wait(10)
        except Exception as exc:
            results["a"] = exc
        finally:
            held.set()
            connections.close_all()

    def second() -> None:
        held.wait(10)
        try:
            results["b"] = node_hello(node=b, frame=_hello("hb"))
        except Exception as exc:
            results["b"] = exc
        finally:
            connections.close_all()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    end = time.monotonic() + 10
    while not _waiting_on_a_lock() and time.monotonic() < end:  # b waits on the job's row
        time.sleep(0.05)
    release.set()
    for t in threads:
        t.join(10)

    for name in ("a", "b"):
        assert not isinstance(results[name], Exception), results[name]
        assert results[name].frames[0]["type"] == "welcome"
    job.refresh_from_db()
    assert job.state == "failed"
    assert AllocationEvent.objects.filter(allocation=job, to_state="failed").count() == 1
    assert Allocation.objects.filter(requeued_from=job).count() == 1
    b.refresh_from_db()
    assert b.agent_version == "1.0" and b.last_heartbeat_at > before  # b's hello was committed
