"""Arrays of tasks (``array: "0-4%2"``) end to end: one submission over REST, each task an
allocation whose start frame carries its index, at most N running at once (the pass's throttle,
also under passes racing on PostgreSQL), listed and held or cancelled as a whole or per task, and
admitted all or nothing within the hard quota."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connections

from nodes.models import Node
from scheduling.actions.lifecycle import allocation_exited
from scheduling.models import Allocation, Quota, VCluster
from scheduling.passes.run import schedule_pass
from scheduling.states import HOLDING
from tests.scheduling.batch_helpers import exit_on, job, post, sent_fixture  # noqa: F401
from tests.scheduling.seed_e2e import client_for

pytestmark = [pytest.mark.postgres]


@pytest.fixture
def cluster(resource_group, vcluster_hpc, two_nodes, tenant_physics, tenant_chemistry, operator, sent):
    return resource_group


def _running(array_id: int) -> list[int]:
    return sorted(Allocation.objects.filter(array_id=array_id, state__in=list(HOLDING)).values_list(
        "array_index", flat=True))


@pytest.mark.django_db
def test_an_array_runs_at_most_its_throttle_and_each_task_knows_its_index(cluster, django_capture_on_commit_callbacks,
                                                                          sent):
    alice = client_for("alice")
    with django_capture_on_commit_callbacks(execute=True):
        response = job(alice, array="0-4%2", per_node={"gpu": 1}, env={"A": "b"})
    assert response.status_code == 201, response.json()
    body = response.json()
    array, tasks = body["id"], body["tasks"]
    assert (body["spec"], body["throttle"], body["size"]) == ("0-4%2", 2, 5)
    assert [t["index"] for t in tasks] == [0, 1, 2, 3, 4]
    with django_capture_on_commit_callbacks(execute=True):
        schedule_pass(cluster.pk)
    assert _running(array) == [0, 1]  # 16 GPUs free, yet two at once
    start = sent.starts(tasks[1]["id"])[0]
    assert start["env"] == {"A": "b", "LATTICE_ARRAY_ID": str(array), "LATTICE_ARRAY_INDEX": "1"}

    with django_capture_on_commit_callbacks(execute=True):
        exit_on(tasks[0]["id"], code=0, reason="completed")
    schedule_pass(cluster.pk)
    assert _running(array) == [1, 2]

    listed = alice.get(f"/api/v1/allocations/?array={array}").json()["results"]
    assert sorted((r["array"], r["array_index"]) for r in listed) == [(array, i) for i in range(5)]
    assert alice.get(f"/api/v1/arrays/{array}/").json()["tasks"][0]["state"] == "completed"
    assert client_for("bob").get(f"/api/v1/arrays/{array}/").status_code == 404


@pytest.mark.django_db
def test_an_array_is_held_and_cancelled_as_a_whole_or_per_task(cluster, django_capture_on_commit_callbacks):
    alice = client_for("alice")
    with django_capture_on_commit_callbacks(execute=True):
        body = job(alice, array="1,3,5-7", per_node={"gpu": 1}).json()
        array, ids = body["id"], [t["id"] for t in body["tasks"]]
        assert [t["index"] for t in body["tasks"]] == [1, 3, 5, 6, 7]
        held = post(alice, f"/api/v1/arrays/{array}/hold/", {"reason": "wait"}).json()
        assert (held["done"], held["skipped"]) == (ids, [])
        assert post(alice, f"/api/v1/allocations/{ids[0]}/release/").status_code == 200
    schedule_pass(cluster.pk)
    assert _running(array) == [1]  # only the released task
    with django_capture_on_commit_callbacks(execute=True):
        assert post(alice, f"/api/v1/allocations/{ids[1]}/cancel/").status_code == 200
        cancelled = post(alice, f"/api/v1/arrays/{array}/cancel/").json()
    assert sorted(cancelled["done"]) == [ids[0], *ids[2:]]
    # The running task keeps its node until its process is gone; the others end at once.
    tasks = dict(Allocation.objects.filter(array_id=array).values_list("pk", "state"))
    assert tasks == {ids[0]: "terminating", **{i: "cancelled" for i in ids[1:]}}
    allocation_exited(allocation=Allocation.objects.get(pk=ids[0]), exit_code=-15, reason="terminated")
    assert set(Allocation.objects.filter(array_id=array).values_list("state", flat=True)) == {"cancelled"}


@pytest.mark.django_db
def test_an_array_is_admitted_all_or_nothing_and_a_bad_spec_names_the_field(cluster):
    alice = client_for("alice")  # the quota allows 10 allocations
    too_many = job(alice, array="0-10", per_node={"gpu": 1})
    assert too_many.status_code == 409
    assert {k: too_many.json()[k] for k in ("quota", "current", "requested", "limit")} == {
        "quota": "max_concurrent_allocations", "current": 0, "requested": 11, "limit": 10}
    for spec in ("", "5-1", "a-b", "0-3%0", "0-2000", "1,,2", "²", "0-²", "１２"):  # digits are ASCII's
        response = job(alice, array=spec, per_node={"gpu": 1})
        assert response.status_code == 400 and "array" in response.json(), (spec, response.json())
        assert "is not an index" in str(response.json()["array"]) or spec in ("", "5-1", "0-3%0", "0-2000")
    assert not Allocation.objects.exists()


@pytest.mark.django_db
def test_an_array_s_what_if_is_refused_past_the_quota_as_its_submission_is(cluster):
    """The what-if counted one task against the quota: it said an array would start that its
    submission refuses whole."""
    alice = client_for("alice")  # the quota allows 10 allocations and 8 nodes
    too_many = post(alice, "/api/v1/allocations/what-if/", {"resource_group": "rg-main", "vcluster": "hpc",
                                                             "per_node": {"gpu": 1}, "array": "0-10"})
    assert too_many.status_code == 409, too_many.json()
    assert {k: too_many.json()[k] for k in ("quota", "current", "requested", "limit")} == {
        "quota": "max_concurrent_allocations", "current": 0, "requested": 11, "limit": 10}
    fits = post(alice, "/api/v1/allocations/what-if/", {"resource_group": "rg-main", "vcluster": "hpc",
                                                        "per_node": {"gpu": 1}, "array": "0-7"})
    assert fits.status_code == 200 and fits.json()["outcome"] == "fits"
    assert not Allocation.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_the_throttle_holds_while_passes_race_and_tasks_end(cluster, django_capture_on_commit_callbacks):
    """Eight threads run passes of the group while another ends running tasks; a watcher on its
    own connection samples how many tasks hold nodes: never more than the throttle."""
    for i in range(2):  # 4 nodes, 32 GPUs: capacity is not what limits the array
        Node.objects.create(name=f"gpu-x{i}", resource_group=cluster, vcluster=VCluster.objects.get(name="hpc"),
                            gpu=8, cpu=64, memory=512, state="ready")
    Quota.objects.filter(tenant__name="physics").update(max_concurrent_allocations=100, max_gpus=100, max_nodes=100)
    response = job(client_for("alice"), array="0-23%3", per_node={"gpu": 1})
    assert response.status_code == 201, response.json()
    array = response.json()["id"]
    seen: list[int] = []
    stop = threading.Event()

    def watch() -> None:
        try:
            while not stop.is_set():
                seen.append(Allocation.objects.filter(array_id=array, state__in=list(HOLDING)).count())
        finally:
            connections.close_all()

    def passes() -> None:
        try:
            while not stop.is_set():
                schedule_pass(cluster.pk)
        finally:
            connections.close_all()

    def finisher() -> None:
        try:
            while Allocation.objects.filter(array_id=array).exclude(state="completed").exists():
                for pk in Allocation.objects.filter(array_id=array, state="running").values_list("id", flat=True):
                    exit_on(pk, code=0, reason="completed")
                time.sleep(0.01)
        finally:
            stop.set()
            connections.close_all()

    threads = [threading.Thread(target=watch), threading.Thread(target=finisher)]
    threads += [threading.Thread(target=passes) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads)
    assert set(Allocation.objects.filter(array_id=array).values_list("state", flat=True)) == {"completed"}
    assert seen and max(seen) <= 3, max(seen)
    assert max(seen) == 3  # the throttle, not something else, was the limit

