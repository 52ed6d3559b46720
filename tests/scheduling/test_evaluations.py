"""Policy evaluations in the console: who may use them, bad input, cancel, and keeping one with
the audit entry of the save it informed. The replay's figures against ``manage.py replay`` with a
real worker are in tests/system/test_evaluation_worker.py."""

from __future__ import annotations

import contextlib
import re
import threading
from datetime import timedelta

import pytest
from django.db import connections
from django.utils import timezone

from scheduling.errors import Conflict
from scheduling.evaluations import (
    Cancelled,
    Meter,
    _finish,
    evaluation_cancel,
    evaluation_run,
    evaluation_start,
)
from scheduling.models import PolicyChange, PolicyEvaluation, ResourceGroup
from scheduling.tasks import periodic_sweep
from tests.scheduling.evaluation_helpers import POLICY_FIELDS, record_history

pytestmark = pytest.mark.django_db


def _evaluate(client, group, days="7", **fields):
    return client.post(f"/ops/groups/{group.name}/evaluations/", {**POLICY_FIELDS, "days": days, **fields})


def test_operator_starts_an_evaluation_that_compares_the_edited_policy_with_the_current(
        client, operator, resource_group, node_gpu_a, tenant_physics, django_capture_on_commit_callbacks):
    record_history(resource_group, [tenant_physics], 40)
    client.force_login(operator)
    with django_capture_on_commit_callbacks() as sent:
        response = _evaluate(client, resource_group, policy_mode="terminate")
    evaluation = PolicyEvaluation.objects.get()
    assert response.status_code == 302 and response["Location"] == \
        f"/ops/groups/{resource_group.name}/evaluations/{evaluation.pk}/"
    assert len(sent) == 1  # the task, once the row is committed
    assert evaluation.status == "queued" and evaluation.days == 7 and evaluation.requested_by == operator
    assert evaluation.current_policy == {"kind": "class_cost"}
    assert evaluation.candidate_policy["mode"] == "terminate"
    assert (evaluation.until - evaluation.since).days == 7
    page = client.get(response["Location"]).content.decode()
    assert 'hx-trigger="every 1s"' in page and "Cancel evaluation" in page
    # What differs between the two, with the engine's defaults filled in: the mode alone.
    assert re.findall(r"<code>(policy\.[a-z_]+)</code>", page) == ["policy.mode"]

    evaluation_run(evaluation.pk)  # the task's body, as the worker runs it
    evaluation.refresh_from_db()
    assert evaluation.status == "done" and evaluation.jobs_done == evaluation.jobs_total == 80
    assert [p["name"] for p in evaluation.report["policies"]] == ["current", "edited"]
    # Each replayed under its own policy: the baseline with the default mode, the edited one with its own.
    assert [p["policy"]["mode"] for p in evaluation.report["policies"]] == ["suspend", "terminate"]
    assert evaluation.report["trace"]["jobs"] == 40
    page = client.get(response["Location"]).content.decode()
    assert "hx-trigger" not in page  # finished: no more polling
    assert "edited against current" in page and "wait_p95_s" in page
    report = client.get(f"/ops/groups/{resource_group.name}/evaluations/{evaluation.pk}/report/")
    assert report.status_code == 200 and b"<svg" in report.content
    assert report["X-Frame-Options"] == "SAMEORIGIN"


@pytest.mark.parametrize("days", ["0", "31", "-1", "seven", ""])
def test_days_out_of_range_are_refused_with_a_field_error_and_start_nothing(client, operator, resource_group,
                                                                          days):
    client.force_login(operator)
    response = _evaluate(client, resource_group, days=days)
    assert response.status_code == 400
    page = response.content.decode()
    assert 'class="field invalid">Evaluate on the last' in page and "errorlist" in page
    # The editor shown again still previews and saves on the policy's own page.
    assert f'<form method="post" class="policy" action="/ops/groups/{resource_group.name}/policy/">' in page
    assert not PolicyEvaluation.objects.exists()


def test_a_policy_that_does_not_validate_is_refused_with_its_field_error(client, operator, resource_group):
    client.force_login(operator)
    response = _evaluate(client, resource_group, policy_tolerance="-1", policy_kind="fair_share")
    assert response.status_code == 400
    assert "Ensure this value is greater than or equal to 0" in response.content.decode()
    response = _evaluate(client, resource_group, policy_kind="no-such-kind")
    assert response.status_code == 400 and "not one of the available choices" in response.content.decode()
    assert not PolicyEvaluation.objects.exists()
    assert ResourceGroup.objects.get(pk=resource_group.pk).policy == {"kind": "class_cost"}


def test_tenants_are_refused_every_url_of_evaluations(client, operator, resource_group, tenant_physics,
                                                      django_user_model):
    evaluation = PolicyEvaluation.objects.create(
        resource_group=resource_group, requested_by=operator, days=1, since=operator.date_joined,
        until=operator.date_joined, current_policy={"kind": "class_cost"}, candidate_policy={"kind": "class_cost"},
        status="done", report_json='{"comparison": []}')
    base = f"/ops/groups/{resource_group.name}/evaluations/"
    client.force_login(django_user_model.objects.get(username="alice"))
    assert client.post(base, {**POLICY_FIELDS, "days": "7"}).status_code == 403
    for url in (f"{base}{evaluation.pk}/", f"{base}{evaluation.pk}/report/"):
        assert client.get(url).status_code == 403, url
    assert client.post(f"{base}{evaluation.pk}/cancel/").status_code == 403
    assert PolicyEvaluation.objects.count() == 1 and not PolicyEvaluation.objects.get().cancel_requested
    client.logout()
    assert client.get(f"{base}{evaluation.pk}/").status_code == 302  # to the login page
    client.force_login(operator)
    other = ResourceGroup.objects.create(name="rg-other", policy={"kind": "class_cost"})
    assert client.get(f"/ops/groups/{other.name}/evaluations/{evaluation.pk}/").status_code == 404


def test_cancel_before_the_task_starts_means_it_never_runs(client, operator, resource_group, node_gpu_a,
                                                         tenant_physics):
    record_history(resource_group, [tenant_physics], 10)
    client.force_login(operator)
    evaluation_id = PolicyEvaluation.objects.get(pk=_evaluate(client, resource_group)["Location"].split("/")[-2]).pk
    assert client.post(f"/ops/groups/{resource_group.name}/evaluations/{evaluation_id}/cancel/").status_code == 302
    evaluation_run(evaluation_id)
    evaluation = PolicyEvaluation.objects.get(pk=evaluation_id)
    assert evaluation.status == "cancelled" and evaluation.report is None and evaluation.started_at is None
    page = client.get(f"/ops/groups/{resource_group.name}/evaluations/{evaluation_id}/").content.decode()
    assert "Cancelled" in page and "Cancel evaluation" not in page


def test_a_running_evaluation_stops_at_its_next_progress_point_once_cancelled(operator, resource_group):
    evaluation = PolicyEvaluation.objects.create(
        resource_group=resource_group, requested_by=operator, days=1, since=operator.date_joined,
        until=operator.date_joined, current_policy={}, candidate_policy={}, status="running")
    meter = Meter(evaluation.pk, 50, 2)
    meter.record(30)
    evaluation.refresh_from_db()
    assert (evaluation.jobs_done, evaluation.jobs_total, evaluation.percent) == (30, 100, 30)
    evaluation_cancel(evaluation=evaluation)
    assert PolicyEvaluation.objects.get(pk=evaluation.pk).status == "running"  # until its next point
    with pytest.raises(Cancelled):
        meter.record(31)


def test_saving_the_evaluated_policy_keeps_the_evaluation_with_the_audit_entry(
        client, operator, resource_group, node_gpu_a, tenant_physics):
    record_history(resource_group, [tenant_physics], 10)
    client.force_login(operator)
    location = _evaluate(client, resource_group, policy_max_victims="1")["Location"]
    evaluation = PolicyEvaluation.objects.get()
    evaluation_run(evaluation.pk)
    assert 'value="1"' in client.get(f"/ops/groups/{resource_group.name}/policy/?evaluation={evaluation.pk}") \
        .content.decode().split('name="policy_max_victims"')[1][:40]
    client.post(f"/ops/groups/{resource_group.name}/policy/", {
        **POLICY_FIELDS, "policy_max_victims": "1", "action": "save", "reason": "evaluated on 7 days",
        "evaluation": evaluation.pk})
    change = PolicyChange.objects.filter(reason="evaluated on 7 days").get()
    assert PolicyEvaluation.objects.get().policy_change == change
    assert ResourceGroup.objects.get(pk=resource_group.pk).policy["max_victims"] == 1
    audit = client.get("/ops/audit/").content.decode()
    assert f'<a href="{location}">evaluation #{evaluation.pk}</a>' in audit
    assert f"audit entry #{change.pk}" in client.get(location).content.decode()
    # The group renamed later: the audit log still leads to the evaluation, under the new name.
    ResourceGroup.objects.filter(pk=resource_group.pk).update(name="renamed")
    renamed = f"/ops/groups/renamed/evaluations/{evaluation.pk}/"
    assert f'<a href="{renamed}">evaluation #{evaluation.pk}</a>' in client.get("/ops/audit/").content.decode()
    assert client.get(renamed).status_code == 200


@pytest.mark.parametrize("fields, created_ago, status, error", [
    ({"status": "running", "progress_at": timedelta(minutes=11)}, None, "failed", "no progress for 10 minutes"),
    ({"status": "running", "progress_at": timedelta(minutes=2)}, None, "running", ""),
    ({}, None, "queued", ""),
    ({}, timedelta(minutes=61), "failed", "never started"),
], ids=["silent", "alive", "waiting", "stale"])
def test_the_sweep_fails_an_evaluation_whose_task_went_silent_or_never_started(operator, resource_group, fields,
                                                                                created_ago, status, error):
    """(One at a time: the installation holds one unfinished evaluation at most.)"""
    now = timezone.now()
    base = {"resource_group": resource_group, "requested_by": operator, "days": 1, "since": now, "until": now,
            "current_policy": {"kind": "class_cost"}, "candidate_policy": {"kind": "class_cost"}}
    if "progress_at" in fields:
        fields = {**fields, "progress_at": now - fields["progress_at"]}
    evaluation = PolicyEvaluation.objects.create(**base, **fields)
    if created_ago is not None:
        PolicyEvaluation.objects.filter(pk=evaluation.pk).update(created_at=now - created_ago)

    periodic_sweep()  # as beat (or the embedded loop) runs it

    evaluation.refresh_from_db()
    assert (evaluation.status, error in evaluation.error) == (status, True)
    if status == "failed":  # a run that was only slow and speaks again keeps the failure (and no report)
        _finish(evaluation.pk, "done", report_json="{}")
        late = PolicyEvaluation.objects.get(pk=evaluation.pk)
        assert late.status == "failed" and late.report is None


def test_one_evaluation_runs_at_a_time_and_a_second_is_refused_naming_the_first(
        client, operator, resource_group, node_gpu_a, tenant_physics):
    record_history(resource_group, [tenant_physics], 10)
    client.force_login(operator)
    first = PolicyEvaluation.objects.get(pk=_evaluate(client, resource_group)["Location"].split("/")[-2])
    refused = _evaluate(client, resource_group, policy_mode="terminate")
    assert refused.status_code == 409
    assert f"evaluation #{first.pk} of {resource_group.name} is queued" in refused.content.decode()
    assert PolicyEvaluation.objects.count() == 1
    evaluation_run(first.pk)
    assert _evaluate(client, resource_group, policy_mode="terminate").status_code == 302  # once it is done


def test_a_second_delivery_leaves_a_live_run_alone_and_takes_over_a_silent_one(operator, resource_group,
                                                                                node_gpu_a, tenant_physics):
    record_history(resource_group, [tenant_physics], 10)
    now = timezone.now()
    evaluation = PolicyEvaluation.objects.create(
        resource_group=resource_group, requested_by=operator, days=1, since=now - timedelta(days=1), until=now,
        current_policy={"kind": "class_cost"}, candidate_policy={"kind": "class_cost"}, status="running",
        progress_at=now, jobs_done=7, jobs_total=20)
    evaluation_run(evaluation.pk)  # the message again, while the first run goes on
    live = PolicyEvaluation.objects.get(pk=evaluation.pk)
    assert (live.status, live.jobs_done, live.report) == ("running", 7, None)
    PolicyEvaluation.objects.filter(pk=evaluation.pk).update(progress_at=now - timedelta(minutes=3))
    evaluation_run(evaluation.pk)  # its worker was lost: this delivery runs it
    assert PolicyEvaluation.objects.get(pk=evaluation.pk).status == "done"


def test_a_failed_evaluation_is_not_kept_with_the_save(client, operator, resource_group):
    client.force_login(operator)
    location = _evaluate(client, resource_group, policy_max_victims="1")["Location"]
    failed = PolicyEvaluation.objects.get(pk=location.split("/")[-2])
    PolicyEvaluation.objects.filter(pk=failed.pk).update(status="failed", error="lost")
    client.post(f"/ops/groups/{resource_group.name}/policy/", {
        **POLICY_FIELDS, "policy_max_victims": "1", "action": "save", "reason": "r", "evaluation": failed.pk})
    assert ResourceGroup.objects.get(pk=resource_group.pk).policy["max_victims"] == 1  # saved
    assert PolicyEvaluation.objects.get(pk=failed.pk).policy_change is None  # not kept with it


def _evaluated(client, operator, group, tenant):
    record_history(group, [tenant], 10)
    client.force_login(operator)
    _evaluate(client, group, policy_max_victims="1")
    evaluation = PolicyEvaluation.objects.get()
    evaluation_run(evaluation.pk)
    return evaluation


def _save(client, group, evaluation, victims, reason):
    return client.post(f"/ops/groups/{group.name}/policy/", {
        **POLICY_FIELDS, "policy_max_victims": victims, "action": "save", "reason": reason,
        "evaluation": evaluation.pk})


def test_a_different_policy_saved_from_the_editor_is_not_kept_with_the_evaluation(
        client, operator, resource_group, node_gpu_a, tenant_physics):
    evaluation = _evaluated(client, operator, resource_group, tenant_physics)
    _save(client, resource_group, evaluation, "2", "not the evaluated one")
    assert ResourceGroup.objects.get(pk=resource_group.pk).policy["max_victims"] == 2  # saved
    assert PolicyEvaluation.objects.get().policy_change is None


def test_the_evaluated_policy_saved_after_another_change_is_not_kept_and_the_editor_says_why(
        client, operator, resource_group, node_gpu_a, tenant_physics):
    evaluation = _evaluated(client, operator, resource_group, tenant_physics)
    editor = f"/ops/groups/{resource_group.name}/policy/?evaluation={evaluation.pk}"
    assert "a save will not keep it" not in client.get(editor).content.decode()
    _save(client, resource_group, evaluation, "3", "someone else's change")
    # The report compared the edited policy with a policy no longer in force.
    assert "a save will not keep it" in client.get(editor).content.decode()
    _save(client, resource_group, evaluation, "1", "the evaluated policy, too late")
    assert ResourceGroup.objects.get(pk=resource_group.pk).policy["max_victims"] == 1  # saved all the same
    assert PolicyEvaluation.objects.get().policy_change is None


def test_the_editor_previews_without_a_reason_and_refuses_a_save_without_one(
        client, operator, resource_group, node_gpu_a):
    client.force_login(operator)
    url = f"/ops/groups/{resource_group.name}/policy/"
    before = ResourceGroup.objects.get(pk=resource_group.pk).policy
    changes = PolicyChange.objects.count()
    preview = client.post(url, {**POLICY_FIELDS, "policy_max_victims": "2", "action": "preview", "reason": ""})
    assert preview.status_code == 200
    page = preview.content.decode()
    assert "A reason is needed to save." not in page
    assert "Preview on the current state" in page
    refused = client.post(url, {**POLICY_FIELDS, "policy_max_victims": "2", "action": "save", "reason": "  "})
    assert refused.status_code == 200
    assert "A reason is needed to save." in refused.content.decode()
    assert ResourceGroup.objects.get(pk=resource_group.pk).policy == before
    assert PolicyChange.objects.count() == changes


def test_an_evaluation_past_its_time_limit_is_failed_saying_so(operator, resource_group, monkeypatch, settings):
    """The evaluator's soft time limit raises inside the replay (Celery's signal; raised here where
    the replay would be): the run is failed with the limit named, not left running."""
    from celery.exceptions import SoftTimeLimitExceeded

    import scheduling.evaluations as evaluations

    settings.LATTICE_EVALUATION_TIME_LIMIT_S = 600
    evaluation = PolicyEvaluation.objects.create(
        resource_group=resource_group, requested_by=operator, days=7, since=timezone.now() - timedelta(days=7),
        until=timezone.now(), current_policy=resource_group.policy, candidate_policy=resource_group.policy)

    def past_the_limit(_evaluation):
        raise SoftTimeLimitExceeded()

    monkeypatch.setattr(evaluations, "_replay", past_the_limit)
    evaluation_run(evaluation.pk)
    failed = PolicyEvaluation.objects.get(pk=evaluation.pk)
    assert failed.status == "failed"
    assert "time limit (600 s" in failed.error


def test_evaluations_go_to_their_own_queue_and_the_scheduler_tasks_do_not():
    from lattice_site.celery import app

    assert app.amqp.router.route({}, "scheduling.evaluate_policy")["queue"].name == "evaluations"
    assert app.amqp.router.route({}, "scheduling.schedule_resource_group")["queue"].name == "celery"


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_evaluations_asked_at_once_for_two_groups_start_one(operator, resource_group, monkeypatch):
    """One at a time in the whole installation, also when two operators ask at the same moment for
    two groups (each start locked only its own group's row, so both found none running and both
    started: two CPU-bound replays at once). The second is refused naming the first."""
    other = ResourceGroup.objects.create(name="rg-other", policy={"kind": "class_cost"})
    barrier = threading.Barrier(2, timeout=10)
    create = PolicyEvaluation.objects.create

    def create_after_both_looked(**fields):
        # Both have found no evaluation running (unless the other was refused before its insert).
        with contextlib.suppress(threading.BrokenBarrierError):
            barrier.wait()
        return create(**fields)

    monkeypatch.setattr(PolicyEvaluation.objects, "create", create_after_both_looked)
    monkeypatch.setattr("scheduling.evaluations.background_task_on_commit", lambda *args: None)
    results: list = [None, None]

    def start(i: int, group: ResourceGroup) -> None:
        try:
            results[i] = evaluation_start(group=group, candidate={"kind": "class_cost", "mode": "terminate"},
                                          days=1, actor=operator)
        except Exception as exc:  # asserted below
            results[i] = exc
            barrier.abort()
        finally:
            connections.close_all()

    threads = [threading.Thread(target=start, args=(i, g)) for i, g in enumerate((resource_group, other))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert PolicyEvaluation.objects.filter(status__in=["queued", "running"]).count() == 1, results
    started = [r for r in results if isinstance(r, PolicyEvaluation)]
    refused = [r for r in results if isinstance(r, Conflict)]
    assert len(started) == 1 and len(refused) == 1, results
    assert f"evaluation #{started[0].pk} of {started[0].resource_group.name} is queued" in refused[0].message


@pytest.mark.postgres
def test_the_migration_to_one_unfinished_evaluation_keeps_the_running_one(operator, resource_group):
    """Evaluations a past race left unfinished side by side: the one running keeps going (not an
    earlier one still queued, which would discard the work done), the others are failed and asked
    to stop, so their task stops at its next progress point instead of running on unseen."""
    import importlib

    from django.apps import apps
    from django.db import connection
    migration = importlib.import_module("scheduling.migrations.0022_one_unfinished_evaluation")
    with connection.cursor() as cursor:  # as before the migration (rolled back with the test)
        cursor.execute("DROP INDEX policyevaluation_one_unfinished")
    now = timezone.now()
    base = {"resource_group": resource_group, "requested_by": operator, "days": 1, "since": now, "until": now,
            "current_policy": {"kind": "class_cost"}, "candidate_policy": {"kind": "class_cost"}}
    queued = PolicyEvaluation.objects.create(**base)
    running = PolicyEvaluation.objects.create(**base, status="running", progress_at=now)
    later = PolicyEvaluation.objects.create(**base)
    PolicyEvaluation.objects.filter(pk=queued.pk).update(created_at=now - timedelta(minutes=5))

    migration.fail_all_but_the_first(apps, None)

    rows = {e.pk: e for e in PolicyEvaluation.objects.all()}
    assert rows[running.pk].status == "running" and not rows[running.pk].cancel_requested
    for pk in (queued.pk, later.pk):
        assert rows[pk].status == "failed" and rows[pk].cancel_requested
        assert f"evaluation #{running.pk} ran at the same time" in rows[pk].error
