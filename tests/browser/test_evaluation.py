"""An operator evaluates an edited policy from the policy page in a real browser: the evaluation
runs in the server's process (no broker, as in the embedded mode), its progress shows while it
runs, then the comparison and the replay's report."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from nodes.models import Node
from scheduling.models import PolicyEvaluation
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
    # While it runs: jobs replayed of both policies' total, refreshed in place.
    expect(page.locator("#evaluation-progress")).to_contain_text("/ 2400 jobs", timeout=60_000)
    expect(page.locator("progress")).to_be_visible()
    # Then the policies side by side, and the replay's own report in a frame.
    expect(page.locator("#evaluation-state")).to_have_text("Done", timeout=180_000)
    table = page.locator("#comparison table")
    expect(table.locator("th").nth(1)).to_have_text("current")
    expect(table.locator("th").nth(2)).to_have_text("edited")
    expect(table.locator("tr", has_text="wait_p95_s")).to_be_visible()
    frame = page.frame_locator("#report")
    expect(frame.locator("h1")).to_contain_text(f"Replay of {resource_group.name}")
    expect(frame.locator("svg").first).to_be_visible()
    page.click("text=Open the editor with the edited policy")
    expect(page.locator("select[name=policy_mode]")).to_have_value("terminate")
