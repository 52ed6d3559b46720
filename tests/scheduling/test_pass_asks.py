"""Asking for the pass after a change: with a broker, asks made while an earlier ask's pass has
not started share its message; every change is still read by a pass that starts after it. Without
one (the embedded mode), every ask runs its pass in the request, as before."""

from __future__ import annotations

import time
from typing import Any

import pytest
from django.test import override_settings

from scheduling import dispatch, pass_asks, tasks
from scheduling.models import Allocation
from scheduling.passes.run import schedule_pass
from tests.scheduling.batch_helpers import job_id
from tests.scheduling.seed_e2e import client_for

pytestmark = [pytest.mark.django_db]


class Broker:
    """The pass's task as the broker would take it: each message recorded, none run."""

    def __init__(self) -> None:
        self.sent: list[int] = []
        self.down = False

    def delay(self, group_id: int) -> None:
        if self.down:
            raise ConnectionError("broker down")
        self.sent.append(group_id)


@pytest.fixture
def broker(monkeypatch: pytest.MonkeyPatch, settings: Any) -> Broker:
    settings.CELERY_TASK_ALWAYS_EAGER = False
    fake = Broker()
    monkeypatch.setattr(dispatch, "_task", lambda name: fake if name == dispatch.SCHEDULE_PASS else None)
    monkeypatch.setattr(dispatch, "_send_all", lambda messages, what: None)
    return fake


@pytest.fixture
def cluster(resource_group, vcluster_hpc, two_nodes, tenant_physics):
    return resource_group


def _mark(group_id: int) -> bool:
    return bool(dispatch._redis().exists(pass_asks._pass_asked_key(group_id)))


@pytest.mark.redis
def test_a_burst_of_submissions_sends_one_message_and_its_pass_reads_every_one(
        cluster, broker, django_capture_on_commit_callbacks):
    pass_asks.pass_starting(cluster.pk)  # no mark left by an earlier test
    alice = client_for("alice")
    ids = []
    for _ in range(3):
        with django_capture_on_commit_callbacks(execute=True):
            ids.append(job_id(alice, per_node={"gpu": 8}))
    assert broker.sent == [cluster.pk]
    assert _mark(cluster.pk)
    schedule_pass(cluster.pk)  # what the worker runs for that one message
    assert not _mark(cluster.pk)
    states = sorted(Allocation.objects.filter(pk__in=ids).values_list("state", flat=True))
    assert states == ["pending", "running", "running"]  # all three read: two fill the two nodes


@pytest.mark.redis
def test_a_change_committed_after_the_pass_started_sends_a_message_of_its_own(
        cluster, broker, django_capture_on_commit_callbacks):
    pass_asks.pass_starting(cluster.pk)
    alice = client_for("alice")
    with django_capture_on_commit_callbacks(execute=True):
        job_id(alice, per_node={"gpu": 8})
    schedule_pass(cluster.pk)
    with django_capture_on_commit_callbacks(execute=True):
        late = job_id(alice, per_node={"gpu": 8})
    assert broker.sent == [cluster.pk, cluster.pk]
    tasks.schedule_resource_group(cluster.pk)  # the second message's pass
    assert Allocation.objects.get(pk=late).state == "running"


@pytest.mark.redis
def test_a_message_the_broker_refused_takes_its_mark_with_it(cluster, broker, django_capture_on_commit_callbacks):
    pass_asks.pass_starting(cluster.pk)
    alice = client_for("alice")
    broker.down = True
    with django_capture_on_commit_callbacks(execute=True):
        job_id(alice, per_node={"gpu": 1})
    assert not _mark(cluster.pk)
    broker.down = False
    with django_capture_on_commit_callbacks(execute=True):
        job_id(alice, per_node={"gpu": 1})
    assert broker.sent == [cluster.pk]


@pytest.mark.redis
def test_a_mark_whose_message_was_lost_lapses(cluster, broker, monkeypatch, django_capture_on_commit_callbacks):
    # Long enough that a loaded machine cannot let it lapse before it is looked at.
    monkeypatch.setattr(pass_asks, "PASS_ASKED_TTL_S", 1.0)
    pass_asks.pass_starting(cluster.pk)
    alice = client_for("alice")
    with django_capture_on_commit_callbacks(execute=True):
        job_id(alice, per_node={"gpu": 1})
    # (the message is lost: no pass starts)
    assert 0 < dispatch._redis().pttl(pass_asks._pass_asked_key(cluster.pk)) <= 1000
    time.sleep(1.1)  # its time passes
    with django_capture_on_commit_callbacks(execute=True):
        job_id(alice, per_node={"gpu": 1})
    assert broker.sent == [cluster.pk, cluster.pk]


def test_without_redis_a_message_is_sent_for_every_ask(cluster, broker, monkeypatch,
                                                        django_capture_on_commit_callbacks):
    """REDIS_URL unreachable or unset with a broker: no mark can be kept, so nothing is shared."""
    monkeypatch.setattr(dispatch, "_redis", lambda: None)
    alice = client_for("alice")
    for _ in range(2):
        with django_capture_on_commit_callbacks(execute=True):
            job_id(alice, per_node={"gpu": 1})
    assert broker.sent == [cluster.pk, cluster.pk]


def test_when_redis_fails_the_message_is_sent_anyway(cluster, broker, monkeypatch,
                                                     django_capture_on_commit_callbacks):
    class Failing:
        def set(self, *args: Any, **kwargs: Any) -> None:
            raise ConnectionError("redis down")

        def delete(self, *args: Any) -> None:
            raise ConnectionError("redis down")

    monkeypatch.setattr(dispatch, "_redis", lambda: Failing())
    alice = client_for("alice")
    for _ in range(2):
        with django_capture_on_commit_callbacks(execute=True):
            job_id(alice, per_node={"gpu": 1})
    assert broker.sent == [cluster.pk, cluster.pk]


def test_in_the_embedded_mode_every_submission_runs_its_pass_at_once(cluster, monkeypatch,
                                                                     django_capture_on_commit_callbacks):
    """No broker: tasks run eagerly in the request, each submission's pass places it before the
    response, and no mark is read or kept."""
    runs: list[int] = []
    real = tasks.schedule_pass
    monkeypatch.setattr(tasks, "schedule_pass", lambda group_id: (runs.append(group_id), real(group_id))[1])

    def no_redis() -> None:
        raise AssertionError("the embedded mode keeps no mark")

    monkeypatch.setattr(pass_asks, "_ask_pass", no_redis)
    alice = client_for("alice")
    with override_settings(CELERY_TASK_ALWAYS_EAGER=True, REDIS_URL=None):
        for _ in range(2):
            with django_capture_on_commit_callbacks(execute=True):
                alloc = job_id(alice, per_node={"gpu": 8})
            assert Allocation.objects.get(pk=alloc).state == "running"
    assert runs == [cluster.pk, cluster.pk]


@pytest.mark.redis
def test_a_watched_submission_is_heard_and_its_pass_asked_once_for_the_burst(
        cluster, broker, monkeypatch, django_capture_on_commit_callbacks):
    pass_asks.pass_starting(cluster.pk)
    heard: list[tuple[str, dict[str, Any]]] = []
    monkeypatch.setattr(dispatch, "_send_all", lambda messages, what: heard.extend(messages))
    alice = client_for("alice")
    dispatch.subscribe("ops", +1)
    try:
        ids = []
        for _ in range(2):
            with django_capture_on_commit_callbacks(execute=True):
                ids.append(job_id(alice, per_node={"gpu": 1}))
    finally:
        dispatch.subscribe("ops", -1)
    assert [(group, message["event"]["kind"], message["event"]["allocation"]) for group, message in heard] == [
        ("ops", "allocation.submitted", ids[0]), ("ops", "allocation.submitted", ids[1])]
    assert broker.sent == [cluster.pk]


@pytest.mark.redis
def test_the_pass_is_asked_even_when_the_event_cannot_be_sent(cluster, broker, monkeypatch,
                                                               django_capture_on_commit_callbacks):
    pass_asks.pass_starting(cluster.pk)

    def broken(*args: Any) -> None:
        raise RuntimeError("live feed broken")

    monkeypatch.setattr(dispatch, "_send_events", broken)
    alice = client_for("alice")
    with pytest.raises(RuntimeError), django_capture_on_commit_callbacks(execute=True):
        job_id(alice, per_node={"gpu": 1})
    assert broker.sent == [cluster.pk]
