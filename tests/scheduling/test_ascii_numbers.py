"""Numbers typed into forms or sent to the API are ASCII digits: "١" (Arabic-Indic one) or "１"
(fullwidth one), which Python's ``int()`` and ``float()`` read as 1, is refused naming the field
and changes nothing, on the pages, over the API (hand-written serializers and the model-backed
ones) and in the admin."""

from __future__ import annotations

import pytest

from scheduling.models import Allocation, Membership, PolicyChange

pytestmark = pytest.mark.django_db

NON_ASCII = ["١", "１", "٣"]
JOB = {"resource_group": "rg-main", "vcluster": "hpc", "nodes": 1, "per_node": {"gpu": 1}, "command": ["run"]}


@pytest.mark.parametrize("value", NON_ASCII)
def test_the_submit_form_refuses_non_ascii_digits(client, tenant_physics, resource_group, two_nodes, value):
    client.force_login(tenant_physics.memberships.first().user)
    form = {"resource_group": resource_group.name, "vcluster": "hpc", "nodes": value, "gpus_per_node": 8,
            "preemption_class": 3, "priority": 10, "checkpoint": "auto", "command": "sleep 5", "action": "submit"}
    page = client.post("/jobs/new/", form)
    assert page.status_code == 200
    assert "nodes" in page.context["form"].errors
    assert not Allocation.objects.exists()


def test_the_submit_form_refuses_a_non_ascii_walltime(client, tenant_physics, resource_group, two_nodes):
    client.force_login(tenant_physics.memberships.first().user)
    form = {"resource_group": resource_group.name, "vcluster": "hpc", "nodes": 1, "gpus_per_node": 8,
            "preemption_class": 3, "priority": 10, "checkpoint": "auto", "command": "sleep 5", "action": "submit",
            "walltime_minutes": "١.٥"}
    page = client.post("/jobs/new/", form)
    assert page.status_code == 200
    assert "walltime_minutes" in page.context["form"].errors
    assert not Allocation.objects.exists()


@pytest.mark.parametrize("over", [{"nodes": "١"}, {"per_node": {"gpu": "１"}}, {"priority": "١٠"},
                                  {"max_requeue": "٣"}, {"walltime_minutes": "١.٥"}, {"checkpoint_minutes": "٣"}])
def test_a_submission_refuses_non_ascii_digits(api_for, tenant_physics, two_nodes, over):
    response = api_for("alice").post("/api/v1/allocations/", {**JOB, **over}, content_type="application/json")
    assert response.status_code == 400, response.content
    assert set(over) <= set(response.json())
    assert not Allocation.objects.exists()


def test_ascii_digits_as_text_are_still_read(api_for, tenant_physics, two_nodes):
    response = api_for("alice").post("/api/v1/allocations/", {**JOB, "nodes": "1", "per_node": {"gpu": "1"},
                                                              "walltime_minutes": "1.5"},
                                     content_type="application/json")
    assert response.status_code == 201, response.content


def test_the_queue_page_refuses_a_non_ascii_offset(client, operator, tenant_physics, resource_group):
    client.force_login(operator)
    response = client.get("/api/v1/resource-groups/rg-main/queue/?offset=١")
    assert response.status_code == 400 and "offset" in response.json()


def test_an_operator_edit_refuses_non_ascii_digits(client, operator, tenant_physics):
    client.force_login(operator)
    member = Membership.objects.get(user__username="alice")
    response = client.patch(f"/api/v1/memberships/{member.pk}/", {"max_priority": "٢٠", "reason": "r"},
                            content_type="application/json")
    assert response.status_code == 400 and "max_priority" in response.json()
    response = client.patch("/api/v1/quotas/physics/", {"max_nodes": "٢", "reason": "r"},
                            content_type="application/json")
    assert response.status_code == 400 and "max_nodes" in response.json()
    response = client.patch("/api/v1/quotas/physics/", {"fair_share": "٠.٥", "reason": "r"},
                            content_type="application/json")
    assert response.status_code == 400 and "fair_share" in response.json()
    assert Membership.objects.get(pk=member.pk).max_priority is None
    assert not PolicyChange.objects.exists()


def test_the_tenant_editor_refuses_non_ascii_digits(client, operator, tenant_physics):
    client.force_login(operator)
    member = Membership.objects.get(user__username="alice")
    data = {"default_priority": "10", "priority_changeable": "on", "min_priority": "0", "max_priority": "١٠٠",
            "fair_share": "0.5", "gpu_hours_budget": "", "reason": "why", "action": "save",
            "m-TOTAL_FORMS": "1", "m-INITIAL_FORMS": "1", "m-MIN_NUM_FORMS": "0", "m-MAX_NUM_FORMS": "1000",
            "m-0-id": str(member.pk), "m-0-default_priority": "", "m-0-priority_changeable": "on",
            "m-0-min_priority": "", "m-0-max_priority": "٢٠"}
    page = client.post("/ops/tenants/physics/", data)
    assert page.status_code == 200
    assert "max_priority" in page.context["form"].errors
    assert "max_priority" in page.context["formset"].forms[0].errors
    assert not PolicyChange.objects.exists()


def test_the_admin_refuses_non_ascii_digits(client, django_user_model, tenant_physics):
    client.force_login(django_user_model.objects.create_superuser("root", password="pw-root-123"))
    member = Membership.objects.get(user__username="alice")
    data = {"user": member.user_id, "tenant": member.tenant_id, "role": "member", "default_priority": "",
            "priority_changeable": "on", "min_priority": "", "max_priority": "٢٠", "unix_user": "",
            "unix_group": "", "change_reason": "try"}
    page = client.post(f"/admin/scheduling/membership/{member.pk}/change/", data)
    assert page.status_code == 200
    assert "max_priority" in page.context["adminform"].form.errors
    assert Membership.objects.get(pk=member.pk).max_priority is None
