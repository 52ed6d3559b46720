"""An operator evaluates an edited policy from the policy page in a real browser: the evaluation
runs in the server's process (no broker, as in the embedded mode), its progress shows while it
runs, then the comparison and the replay's report."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from nodes.models import Node
from scheduling.models import EvaluationStatus, PolicyEvaluation
from tests.scheduling.evaluation_helpers import record_history

pytestmark = [pytest.mark.browser, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def test_operator_evaluates_an_edited_policy_and_sees_progress_then_the_report(
        login, live_server_url, operator, resource_group, vcluster_hpc, tenant_physics, tenant_chemistry):
    Node.objects.create(name="gpu-b", resource_group=resource_group, vcluster=vcluster_hpc, gpu=8, cpu=64,
                        memory=512, state="ready")
    record_history(resource_group, [tenant_physics, tenant_chemistry], 1200)  # seconds to replay
    page = login("op", "pw-op-123")
    page.goto(f"{live_server_url}/ops/groups/{resource_group.name}/policy/")
    page.select_option("select[name=policy_mode]", "terminate")
    page.fill("input[name=days]", "0")
    page.click("button[value=evaluate]")
    expect(page.locator(".evaluate .errorlist")).to_contain_text("greater than or equal to 1")
    assert not PolicyEvaluation.objects.exists()
    expect(page.locator("select[name=policy_mode]")).to_have_value("terminate")  # the edit is kept
    page.fill("input[name=days]", "3")
    page.click("button[value=evaluate]")
    page.wait_for_url("**/evaluations/*/")
    evaluation = PolicyEvaluation.objects.get()
    assert evaluation.candidate_policy["mode"] == "terminate" and evaluation.days == 3
    # The policies side by side once it is done, and the replay's own report in a frame. (How fast
    # the replay runs decides whether a refresh catches it running: its progress is checked below
    # on a run held mid-way.)
    expect(page.locator("#evaluation-state")).to_have_text("Done", timeout=180_000)
    evaluation.refresh_from_db()
    assert (evaluation.jobs_done, evaluation.jobs_total) == (2400, 2400)  # both policies' 1,200 jobs
    table = page.locator("#comparison table")
    expect(table.locator("th").nth(1)).to_have_text("current")
    expect(table.locator("th").nth(2)).to_have_text("edited")
    expect(table.locator("tr", has_text="wait_p95_s")).to_be_visible()
    frame = page.frame_locator("#report")
    expect(frame.locator("h1")).to_contain_text(f"Replay of {resource_group.name}")
    expect(frame.locator("svg").first).to_be_visible()
    page.click("text=Open the editor with the edited policy")
    expect(page.locator("select[name=policy_mode]")).to_have_value("terminate")


def test_a_running_evaluation_shows_its_progress_and_then_its_result_without_a_reload(
        login, live_server_url, operator, resource_group):
    """The page of an evaluation a worker is running, held where it reported 600 of 2,400 jobs: the
    progress in words and as a bar, refreshed in place until the run ends."""
    now = timezone.now()
    evaluation = PolicyEvaluation.objects.create(
        resource_group=resource_group, requested_by=operator, days=3, since=now - timedelta(days=3), until=now,
        current_policy=resource_group.policy, candidate_policy={**resource_group.policy, "mode": "terminate"},
        status=EvaluationStatus.RUNNING, started_at=now, progress_at=now, jobs_done=600, jobs_total=2400)
    page = login("op", "pw-op-123")
    page.goto(f"{live_server_url}/ops/groups/{resource_group.name}/evaluations/{evaluation.pk}/")
    expect(page.locator("#evaluation-state")).to_have_text("Running")
    expect(page.locator("#evaluation-progress")).to_have_text("600 / 2400 jobs")
    expect(page.locator("progress")).to_have_attribute("value", "600")
    PolicyEvaluation.objects.filter(pk=evaluation.pk).update(jobs_done=1800, progress_at=timezone.now())
    expect(page.locator("#evaluation-progress")).to_have_text("1800 / 2400 jobs")  # refreshed, not reloaded
    PolicyEvaluation.objects.filter(pk=evaluation.pk).update(
        status=EvaluationStatus.CANCELLED, finished_at=timezone.now(), cancel_requested=True)
    expect(page.locator("#evaluation-state")).to_have_text("Cancelled")
    expect(page.locator("button", has_text="Cancel evaluation")).to_have_count(0)
