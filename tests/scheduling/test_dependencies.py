"""Dependencies between a tenant's jobs (afterok, afterany, afternotok) end to end: submitted over
REST, settled by the pass when the job they name ends (its agent's exit report asks for the
pass), cancelled when they can never be met, refused at submission when they name a job that is
not the tenant's own or does not exist yet."""

from __future__ import annotations

import pytest

from scheduling.models import Allocation
from scheduling.passes.run import schedule_pass
from tests.scheduling.batch_helpers import exit_on, job, job_id, post, sent_fixture, state  # noqa: F401
from tests.scheduling.seed_e2e import client_for

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]


@pytest.fixture
def cluster(resource_group, vcluster_hpc, two_nodes, tenant_physics, tenant_chemistry, sent):
    return resource_group


def _first_then(capture, cluster, kind, **extra):
    """A job that runs, and a job that depends on it by ``kind``: the dependent waits though a
    node is free."""
    alice = client_for("alice")
    with capture(execute=True):
        first = job_id(alice, name="first")
        second = job_id(alice, name="second", depends_on=[{"type": kind, "job": first}], **extra)
    schedule_pass(cluster.pk)
    assert (state(first), state(second)) == ("running", "pending")
    assert Allocation.objects.get(pk=second).dependency == "waiting"
    return first, second


@pytest.mark.parametrize(("kind", "code", "reason", "then"), [
    ("afterok", 0, "completed", "running"),
    ("afterok", 1, "failed", "cancelled"),
    ("afternotok", 1, "failed", "running"),
    ("afternotok", 0, "completed", "cancelled"),
    ("afterany", 0, "completed", "running"),
    ("afterany", 1, "failed", "running"),
])
def test_a_dependency_is_settled_by_the_pass_when_its_job_ends(cluster, django_capture_on_commit_callbacks, sent,
                                                               kind, code, reason, then):
    first, second = _first_then(django_capture_on_commit_callbacks, cluster, kind, requeue_policy="never")
    Allocation.objects.filter(pk=first).update(requeue_policy="never")
    sent.tasks.clear()
    with django_capture_on_commit_callbacks(execute=True):
        exit_on(first, code=code, reason=reason)
    assert cluster.pk in sent.passes_asked()  # the end of the job it waits for asks for a pass
    schedule_pass(cluster.pk)
    assert state(second) == then
    last = Allocation.objects.get(pk=second).events.order_by("id")
    if then == "cancelled":
        assert last.filter(to_state="cancelled").get().reason.startswith(
            f"DependencyNeverSatisfied: {kind} on job {first}, which ended ")
    else:
        assert "dependencies met" in last.values_list("reason", flat=True)


def test_afterany_counts_a_cancel_as_an_end(cluster, django_capture_on_commit_callbacks):
    first, second = _first_then(django_capture_on_commit_callbacks, cluster, "afterany")
    with django_capture_on_commit_callbacks(execute=True):
        assert post(client_for("alice"), f"/api/v1/allocations/{first}/cancel/").status_code == 200
        exit_on(first, code=-15, reason="terminated")
    schedule_pass(cluster.pk)
    assert state(second) == "running"


def test_with_kill_on_invalid_dep_false_a_never_satisfiable_job_stays_pending(cluster,
                                                                              django_capture_on_commit_callbacks):
    first, second = _first_then(django_capture_on_commit_callbacks, cluster, "afterok", kill_on_invalid_dep=False)
    Allocation.objects.filter(pk=first).update(requeue_policy="never")
    with django_capture_on_commit_callbacks(execute=True):
        exit_on(first, code=2, reason="failed")
    schedule_pass(cluster.pk)
    schedule_pass(cluster.pk)
    alloc = Allocation.objects.get(pk=second)
    assert (alloc.state, alloc.dependency) == ("pending", "never")
    assert alloc.events.filter(reason__contains="kept pending").count() == 1


def test_a_dependency_follows_a_failed_job_into_its_requeued_copy(cluster, django_capture_on_commit_callbacks):
    first, second = _first_then(django_capture_on_commit_callbacks, cluster, "afterok")
    Allocation.objects.filter(pk=first).update(requeue_policy="always")
    with django_capture_on_commit_callbacks(execute=True):
        exit_on(first, code=1, reason="failed")
    copy = Allocation.objects.get(requeued_from_id=first)
    schedule_pass(cluster.pk)  # the copy runs; the dependent still waits for it
    assert (state(copy.pk), state(second)) == ("running", "pending")
    with django_capture_on_commit_callbacks(execute=True):
        exit_on(copy.pk, code=0, reason="completed")
    schedule_pass(cluster.pk)
    assert state(second) == "running"


def test_dependencies_on_unknown_or_other_tenants_jobs_are_refused(cluster, django_capture_on_commit_callbacks):
    alice, bob = client_for("alice"), client_for("bob")
    with django_capture_on_commit_callbacks(execute=True):
        theirs = job_id(bob)
        mine = job_id(alice)
    for depends_on in ([{"type": "afterok", "job": theirs}],  # another tenant's
                       [{"type": "afterok", "job": mine + 100}],  # not submitted yet: could close a cycle
                       [{"type": "afterok", "job": mine}, {"type": "afterany", "job": mine}],
                       [{"type": "after", "job": mine}],
                       [{"type": "afterok", "job": mine, "extra": 1}]):
        response = job(alice, depends_on=depends_on)
        assert response.status_code == 400 and "depends_on" in response.json(), (depends_on, response.json())
    assert Allocation.objects.filter(tenant__name="physics").count() == 1
