"""Operators and tenants in a real browser against a live server."""

from __future__ import annotations

import json
import time
import urllib.request

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from scheduling.actions.tokens import api_token_issue
from scheduling.models import Allocation, Placement, PolicyChange

pytestmark = [pytest.mark.browser, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def test_operator_changes_a_policy_with_reason_sees_preview_and_audit(login, live_server_url, operator,
                                                                     resource_group):
    page = login("op", "pw-op-123")
    page.goto(f"{live_server_url}/ops/groups/{resource_group.name}/policy/")
    # Only the selected kind's fields are shown (all of them are without JavaScript).
    kind = page.locator("select[name=policy_kind]").input_value()
    queue_only = page.locator("input[name=policy_no_preempt_run_minutes]")
    assert kind != "queue"
    expect(queue_only).to_be_hidden()  # (waits for the page's script, as a person would)
    page.select_option("select[name=policy_kind]", "queue")
    expect(queue_only).to_be_visible()
    page.select_option("select[name=policy_kind]", kind)
    expect(queue_only).to_be_hidden()
    page.fill("input[name=policy_max_victims]", "2")
    page.fill("textarea[name=reason]", "limit collateral damage")
    page.click("button[value=preview]")
    assert page.locator("#preview h2").inner_text() == "Preview on the current state"
    expect(queue_only).to_be_hidden()  # the form the preview re-rendered
    assert not PolicyChange.objects.exists()
    page.click("button[value=save]")
    page.wait_for_url("**/ops/audit/")
    row = page.locator("tr.audit-row").first.inner_text()
    assert "edit" in row and "limit collateral damage" in row and "op" in row
    assert resource_group.__class__.objects.get(pk=resource_group.pk).policy["max_victims"] == 2


def test_preemption_through_the_api_appears_in_the_open_console_without_reload(
        login, live_server_url, operator, resource_group, vcluster_hpc, node_gpu_a, tenant_physics, make_allocation):
    low = make_allocation(state="running", node_count=1, per_node_gpu=8, preemption_class=1, checkpoint="auto",
                          vcluster=vcluster_hpc, started_at=timezone.now())
    Placement.objects.create(allocation=low, node=node_gpu_a, gpu=8)
    page = login("op", "pw-op-123")
    page.goto(f"{live_server_url}/ops/")
    page.wait_for_function("document.body.dataset.live === 'on'", timeout=10_000)

    token = api_token_issue(user=tenant_physics.memberships.first().user)
    body = json.dumps({"resource_group": resource_group.name, "vcluster": "hpc", "per_node": {"gpu": 8},
                       "preemption_class": 7, "checkpoint": "auto", "command": ["sleep", "60"]}).encode()
    request = urllib.request.Request(f"{live_server_url}/api/v1/allocations/", data=body, method="POST",
                                     headers={"Content-Type": "application/json",
                                              "Authorization": f"Token {token}"})
    sent = time.monotonic()
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 201
    # The goal: the preemption is in the open console within 2 seconds of the request.
    page.wait_for_selector("#live-feed li.decision a:has-text('PREEMPT')", timeout=2_000)
    assert time.monotonic() - sent < 2.5
    assert Allocation.objects.get(pk=low.pk).state == "checkpointing"
    # The victim's state change arrives too, linked to its page and stamped with when it came
    # (no time goal of its own: a loaded machine may take longer).
    change = page.wait_for_selector(f"#live-feed li.allocation-state:has(a[href='/jobs/{low.pk}/'])",
                                    timeout=10_000)
    assert "checkpointing" in change.inner_text()
    assert change.query_selector("time[datetime]") is not None


def test_tenant_reads_the_explanation_and_cannot_see_others(login, live_server_url, resource_group, vcluster_hpc,
                                                            node_gpu_a, tenant_physics, tenant_chemistry,
                                                            django_user_model):
    from scheduling.passes.run import schedule_pass

    alice = django_user_model.objects.get(username="alice")
    bob = django_user_model.objects.get(username="bob")
    common = {"resource_group": resource_group, "vcluster": vcluster_hpc, "node_count": 1, "per_node_gpu": 8,
              "checkpoint": "auto", "submitted_at": timezone.now(), "state": "pending"}
    mine = Allocation.objects.create(tenant=tenant_physics, user=alice, preemption_class=1, **common)
    schedule_pass(resource_group.pk)
    theirs = Allocation.objects.create(tenant=tenant_chemistry, user=bob, preemption_class=9, **common)
    schedule_pass(resource_group.pk)

    page = login("alice", "pw-alice-123")
    page.goto(f"{live_server_url}/jobs/{mine.pk}/")
    assert "a class-9 allocation of another tenant" in page.locator(".preemption .explanation").inner_text()
    assert page.goto(f"{live_server_url}/jobs/{theirs.pk}/").status == 404
    assert page.goto(f"{live_server_url}/ops/").status == 403
