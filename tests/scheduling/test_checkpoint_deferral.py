"""Checkpoint deferrals: granted up to the group policy's max_deferral_minutes, written to the
history, then forced; the console and the API edit the maximum like any policy field."""

from __future__ import annotations

from datetime import timedelta

import pytest

from scheduling.actions.lifecycle import allocation_deadline
from scheduling.actions.preemption import allocation_checkpoint_progress, allocation_defer
from scheduling.models import ResourceGroup
from scheduling.passes.run import schedule_pass
from tests.scheduling.test_pages import POLICY

pytestmark = pytest.mark.django_db


@pytest.fixture
def checkpointing(resource_group, vcluster_hpc, node_gpu_a, make_allocation):
    """A class-2 job checkpointing for a class-7 one (a 10-minute checkpoint timeout)."""
    def make(**policy):
        ResourceGroup.objects.filter(pk=resource_group.pk).update(policy={"kind": "class_cost", **policy})
        job = {"state": "pending", "node_count": 1, "per_node_gpu": 8, "checkpoint": "auto", "vcluster": vcluster_hpc}
        low = make_allocation(preemption_class=2, **job)
        schedule_pass(resource_group.pk)
        make_allocation(preemption_class=7, **job)
        schedule_pass(resource_group.pk)
        low.refresh_from_db()
        assert low.state == "checkpointing"
        return low
    return make


def _history(alloc) -> list[str]:
    return list(alloc.events.order_by("id").values_list("reason", flat=True))


def test_the_policy_sets_the_total_deferral_and_each_request_is_in_the_history(checkpointing):
    low = checkpointing(max_deferral_minutes=0.5)
    first = low.deadline_at
    assert allocation_defer(allocation=low, seconds=20) == 20
    assert allocation_defer(allocation=low, seconds=20) == 10
    assert allocation_defer(allocation=low, seconds=5) == 0
    low.refresh_from_db()
    assert (low.deadline_at, low.deferred_seconds) == (first + timedelta(seconds=30), 30)
    assert _history(low)[-3:] == ["checkpoint deferral: asked 20s, granted 20s",
                                  "checkpoint deferral: asked 20s, granted 10s",
                                  "checkpoint deferral: asked 5s, granted 0s"]


def test_without_the_setting_the_maximum_is_five_minutes(checkpointing):
    low = checkpointing()
    assert allocation_defer(allocation=low, seconds=10_000) == 300


def test_a_victim_that_used_every_deferral_is_forced_at_its_deadline_without_an_extension(checkpointing):
    low = checkpointing(max_deferral_minutes=1)
    allocation_defer(allocation=low, seconds=60)
    allocation_checkpoint_progress(allocation=low)  # responsive, yet out of deferrals: no extension
    low.refresh_from_db()
    allocation_deadline(allocation=low, now=low.deadline_at + timedelta(seconds=1))
    low.refresh_from_db()
    # Forced: it stops (keeping its nodes until it is gone), with no extension on top.
    assert low.state == "terminating" and not low.deadline_extended
    assert _history(low)[-1] == "checkpoint timed out after the maximum deferral: stopping"
    allocation_deadline(allocation=low, now=low.deadline_at + timedelta(seconds=1))
    low.refresh_from_db()
    assert low.state == "failed"
    assert _history(low)[-1] == "checkpoint timed out after the maximum deferral; killed after grace"


def test_a_victim_that_deferred_less_than_the_maximum_still_gets_its_extension(checkpointing):
    low = checkpointing(max_deferral_minutes=1)
    allocation_defer(allocation=low, seconds=30)
    low.refresh_from_db()
    deadline = low.deadline_at
    allocation_deadline(allocation=low, now=deadline + timedelta(seconds=1))
    low.refresh_from_db()
    assert low.state == "checkpointing" and low.deadline_at == deadline + timedelta(minutes=5)  # half of 10
    assert _history(low)[-1] == "checkpoint deadline extended by 300.0s (responsive, once)"


def test_the_maximum_is_edited_through_the_api_and_the_console_with_field_errors(
        client, operator, resource_group):
    client.force_login(operator)
    url = "/api/v1/resource-groups/rg-main/policy/"
    for bad in (-1, 1441, "five"):
        refused = client.put(url, {"policy": {"kind": "class_cost", "max_deferral_minutes": bad}, "reason": "r"},
                             content_type="application/json")
        assert refused.status_code == 400 and "max_deferral_minutes" in refused.json()["policy"], bad
    done = client.put(url, {"policy": {"kind": "class_cost", "max_deferral_minutes": 2}, "reason": "long saves"},
                      content_type="application/json")
    assert done.status_code == 200, done.content
    assert ResourceGroup.objects.get(pk=resource_group.pk).policy["max_deferral_minutes"] == 2

    page = f"/ops/groups/{resource_group.name}/policy/"
    assert b'name="policy_max_deferral_minutes"' in client.get(page).content
    refused = client.post(page, {**POLICY, "policy_max_deferral_minutes": "-3", "reason": "r", "action": "save"})
    assert refused.status_code == 200 and "policy_max_deferral_minutes" in refused.context["form"].errors
    saved = client.post(page, {**POLICY, "policy_max_deferral_minutes": "0.5", "reason": "r", "action": "save"})
    assert saved.status_code == 302
    assert ResourceGroup.objects.get(pk=resource_group.pk).policy["max_deferral_minutes"] == 0.5
