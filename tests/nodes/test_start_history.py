"""One history row per start: the agents of a multi-node start each report their process started,
and the job's history (the events API) shows one row naming every node with its pid, also when
the agents report at the same moment (PostgreSQL, one thread per agent)."""

from __future__ import annotations

import threading

import pytest
from django.db import IntegrityError, connections

import nodes.actions
from nodes.actions import allocation_report
from nodes.models import Node, ProcessedFrame
from nodes.protocol import Started
from scheduling.models import Allocation
from scheduling.passes.run import schedule_pass
from tests.scheduling.batch_helpers import job_id, sent_fixture  # noqa: F401
from tests.scheduling.seed_e2e import client_for

pytestmark = [pytest.mark.postgres]


def _started_rows(alice, pk: int) -> list[str]:
    events = alice.get(f"/api/v1/allocations/{pk}/events/").json()["results"]
    return [e["reason"] for e in events if e["reason"].startswith("started on")]


def _two_node_job(resource_group) -> int:
    pk = job_id(client_for("alice"), nodes=2, preemption_class=3)
    schedule_pass(resource_group.pk)
    assert sorted(Allocation.objects.get(pk=pk).ran_on) == ["gpu-a", "gpu-b"]
    return pk


@pytest.mark.django_db
def test_a_two_node_start_is_one_history_row_naming_both_nodes(resource_group, vcluster_hpc, two_nodes,
                                                                  tenant_physics, sent):
    pk = _two_node_job(resource_group)
    alice = client_for("alice")
    a, b = Node.objects.get(name="gpu-a"), Node.objects.get(name="gpu-b")
    assert allocation_report(node=b, frame=Started(id="s-b", allocation=str(pk), pid=12))
    assert _started_rows(alice, pk) == ["started on gpu-b (pid 12)"]
    assert allocation_report(node=a, frame=Started(id="s-a", allocation=str(pk), pid=11))
    assert not allocation_report(node=a, frame=Started(id="s-a", allocation=str(pk), pid=11))  # a duplicate
    assert _started_rows(alice, pk) == ["started on gpu-b (pid 12), gpu-a (pid 11)"]
    # The same node reporting a process again ran a new one: a new row.
    assert allocation_report(node=a, frame=Started(id="s-a2", allocation=str(pk), pid=21))
    assert _started_rows(alice, pk) == ["started on gpu-b (pid 12), gpu-a (pid 11)", "started on gpu-a (pid 21)"]


@pytest.mark.django_db(transaction=True)
def test_agents_reporting_at_once_still_write_one_row(resource_group, vcluster_hpc, two_nodes, tenant_physics,
                                                      sent):
    pk = _two_node_job(resource_group)
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def report(name: str, pid: int) -> None:
        try:
            barrier.wait()
            allocation_report(node=Node.objects.get(name=name), frame=Started(id=f"s-{name}", allocation=str(pk),
                                                                             pid=pid))
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=report, args=(name, pid)) for name, pid in (("gpu-a", 11), ("gpu-b", 12))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    rows = _started_rows(client_for("alice"), pk)
    assert len(rows) == 1 and sorted(rows[0].removeprefix("started on ").split(", ")) == [
        "gpu-a (pid 11)", "gpu-b (pid 12)"]


@pytest.mark.django_db
def test_only_a_repeated_frame_id_is_taken_for_a_repeat(resource_group, vcluster_hpc, two_nodes, tenant_physics,
                                                         sent, monkeypatch):
    """Another integrity error while a report is applied is not acknowledged as a repeat (the
    report would be lost): it rolls the report back, frame id included, and the resent frame is
    applied."""
    pk = _two_node_job(resource_group)
    a = Node.objects.get(name="gpu-a")

    def broken(*args, **kwargs):
        raise IntegrityError("a constraint of the history")

    frame = Started(id="s-a", allocation=str(pk), pid=11)
    with monkeypatch.context() as m:
        m.setattr(nodes.actions, "_started_row", broken)
        with pytest.raises(IntegrityError):
            allocation_report(node=a, frame=frame)
    assert not ProcessedFrame.objects.filter(node=a, frame_id="s-a").exists()
    assert allocation_report(node=a, frame=frame)
    assert _started_rows(client_for("alice"), pk) == ["started on gpu-a (pid 11)"]
