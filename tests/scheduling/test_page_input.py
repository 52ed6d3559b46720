"""Hostile or careless input on the pages (the portal and the console): a query parameter that is
not an id, a date past what the database stores, a forged formset, a cleared JSON box, a reason
with a NUL. Each is refused (or ignored, for a page's own cursor) and changes nothing, never a 500."""

from __future__ import annotations

import pytest

from scheduling.models import Allocation, Membership, PolicyChange, VCluster
from tests.scheduling.test_tenant_editor import _form as tenant_form

pytestmark = pytest.mark.django_db

NOT_IDS = ["²", "١٢", "9" * 30, "-1", "1" * 5000]  # (past 4,300 digits int() refuses any text)


@pytest.mark.parametrize("value", NOT_IDS)
@pytest.mark.parametrize("name", ["before", "array"])
def test_portal_list_ignores_a_cursor_or_array_that_is_not_an_id(client, make_allocation, name, value):
    job = make_allocation(state="pending")
    client.force_login(job.user)
    response = client.get("/jobs/", {name: value})
    assert response.status_code == 200
    assert f'href="/jobs/{job.pk}/"' in response.content.decode()


@pytest.mark.parametrize("value", NOT_IDS)
def test_console_pages_ignore_an_id_parameter_that_is_not_one(client, operator, resource_group, value):
    client.force_login(operator)
    assert client.get("/ops/audit/", {"before": value}).status_code == 200
    assert client.get(f"/ops/groups/{resource_group.name}/policy/", {"evaluation": value}).status_code == 200


@pytest.mark.parametrize("until", ["0001-01-01 00:00:00+14:00", "9999-12-31 23:59:59-12:00", "2000-01-01 00:00"])
def test_protect_until_a_time_that_cannot_be_stored_or_has_passed_is_refused(client, operator, make_allocation,
                                                                             until):
    job = make_allocation(state="pending")
    client.force_login(operator)
    response = client.post(f"/ops/allocations/{job.pk}/override/",
                           {"action": "protect", "until": until, "reason": "deadline"})
    assert response.status_code == 400
    assert "until" in response.content.decode()
    job.refresh_from_db()
    assert job.protected_until is None and not PolicyChange.objects.exists()


@pytest.mark.parametrize("action", ["preview", "save"])
@pytest.mark.parametrize("forged", ["other_member", "extra_form", "no_initial_forms", "not_an_id"])
def test_tenant_editor_refuses_a_member_form_that_is_not_one_of_its_members(client, operator, tenant_physics,
                                                                            tenant_chemistry, action, forged):
    bob = Membership.objects.get(user__username="bob")
    changes = {"other_member": {"m-0-id": str(bob.pk), "m-0-default_priority": "7"},
               "extra_form": {"m-TOTAL_FORMS": "2", "m-1-default_priority": "7"},
               "no_initial_forms": {"m-INITIAL_FORMS": "0", "m-0-default_priority": "7"},
               "not_an_id": {"m-0-id": "abc", "m-0-default_priority": "7"}}[forged]
    client.force_login(operator)
    response = client.post("/ops/tenants/physics/", tenant_form(reason="r", action=action, **changes))
    assert response.status_code == 200
    assert response.context["formset"].non_form_errors()
    assert "members of physics" in response.content.decode()
    assert Membership.objects.count() == 2 and not PolicyChange.objects.exists()
    assert set(Membership.objects.values_list("default_priority", flat=True)) == {None}


@pytest.mark.parametrize("weights", ["", "null"])
def test_clearing_a_vcluster_s_weights_saves_none_rather_than_failing(client, operator, resource_group,
                                                                      vcluster_hpc, weights):
    VCluster.objects.filter(pk=vcluster_hpc.pk).update(weights={"w1": 0.5})
    client.force_login(operator)
    url = f"/ops/groups/{resource_group.name}/vclusters/{vcluster_hpc.pk}/"
    form = {"type": "hpc_batch", "max_borrow_pct": "1.0", "weights": weights, "reason": "defaults again"}
    assert client.post(url, {**form, "action": "preview"}).status_code == 200
    assert client.post(url, {**form, "action": "save"}).status_code == 302
    vcluster_hpc.refresh_from_db()
    assert vcluster_hpc.weights == {}
    assert PolicyChange.objects.get().reason == "defaults again"


@pytest.mark.parametrize("reason", ["a\x00b", "x" * 2001])
def test_a_reason_with_a_nul_or_too_long_is_refused_by_pause_and_hold(client, operator, resource_group,
                                                                      make_allocation, reason):
    job = make_allocation(state="pending")
    client.force_login(operator)
    paused = client.post(f"/ops/groups/{resource_group.name}/pause/",
                         {"reason": reason, "paused": "1", "confirmed": "1"})
    assert paused.status_code == 400
    client.force_login(job.user)
    held = client.post(f"/jobs/{job.pk}/hold/", {"reason": reason})
    assert held.status_code == 400
    resource_group.refresh_from_db()
    assert not resource_group.paused and not Allocation.objects.get(pk=job.pk).held
    assert not PolicyChange.objects.exists()


def test_the_submit_form_refuses_a_walltime_past_a_century(client, tenant_physics, resource_group, two_nodes):
    client.force_login(tenant_physics.memberships.first().user)
    form = {"resource_group": resource_group.name, "vcluster": "hpc", "nodes": 1, "gpus_per_node": 8,
            "preemption_class": 3, "priority": 10, "checkpoint": "auto", "command": "sleep 5",
            "walltime_minutes": "1e308", "action": "submit"}
    page = client.post("/jobs/new/", form)
    assert page.status_code == 200 and "less than or equal to 52560000" in page.content.decode()
    assert not Allocation.objects.exists()


def test_the_submit_form_splits_the_command_as_a_shell_would_and_refuses_an_open_quote(
        client, tenant_physics, resource_group, two_nodes):
    client.force_login(tenant_physics.memberships.first().user)
    form = {"resource_group": resource_group.name, "vcluster": "hpc", "nodes": 1, "gpus_per_node": 8,
            "preemption_class": 3, "priority": 10, "checkpoint": "auto", "action": "submit"}
    page = client.post("/jobs/new/", {**form, "command": 'python -c "print(1); print(2)"'})
    assert page.status_code == 302
    assert Allocation.objects.get().command == ["python", "-c", "print(1); print(2)"]
    page = client.post("/jobs/new/", {**form, "command": 'python -c "print(1)'})
    assert page.status_code == 200 and "cannot split the command into words" in page.content.decode()
    assert 'python -c &quot;print(1)' in page.content.decode()  # what was typed is kept
    assert Allocation.objects.count() == 1


def test_the_submit_form_takes_the_tenant_s_default_group_when_none_is_chosen(
        client, tenant_physics, resource_group, two_nodes):
    client.force_login(tenant_physics.memberships.first().user)
    form = {"resource_group": "", "nodes": 1, "gpus_per_node": 8, "preemption_class": 3, "checkpoint": "none",
            "command": "sleep 5", "action": "submit"}
    page = client.post("/jobs/new/", form)
    assert page.status_code == 200 and "name a resource group (the tenant has no default)" in page.content.decode()
    assert not Allocation.objects.exists()
    tenant_physics.quota.default_resource_group = resource_group
    tenant_physics.quota.save()
    assert client.post("/jobs/new/", form).status_code == 302
    assert Allocation.objects.get().resource_group == resource_group


NESTED = "[" * 100_000  # past what json follows: a RecursionError, not a JSONDecodeError


@pytest.mark.parametrize(("kind", "field"), [("vclusters", "weights"), ("session-types", "preempts")])
@pytest.mark.parametrize("action", ["preview", "save"])
def test_a_json_box_nested_past_the_parser_is_a_field_error_and_changes_nothing(client, operator, resource_group,
                                                                                vcluster_hpc, kind, field, action):
    from scheduling.models import SessionType

    row = vcluster_hpc if kind == "vclusters" else SessionType.objects.create(resource_group=resource_group,
                                                                              name="batch")
    before = getattr(row, field)
    client.force_login(operator)
    response = client.post(f"/ops/groups/{resource_group.name}/{kind}/{row.pk}/",
                           {field: NESTED, "reason": "deep", "action": action})
    assert response.status_code == 200
    assert "Enter a valid JSON." in response.content.decode()
    row.refresh_from_db()
    assert getattr(row, field) == before and not PolicyChange.objects.exists()


@pytest.mark.parametrize(("model_name", "field"), [("VCluster", "weights"), ("SessionType", "preempts"),
                                                   ("ResourceGroup", "policy"), ("Node", "labels")])
def test_the_admin_s_json_boxes_refuse_text_nested_past_the_parser(model_name, field):
    from django import forms
    from django.apps import apps
    from django.contrib import admin

    model = next(m for m in apps.get_models() if m.__name__ == model_name)
    box = admin.site._registry[model].formfield_for_dbfield(model._meta.get_field(field), request=None)
    if box is None or not isinstance(box, forms.JSONField):
        pytest.skip(f"the admin shows no JSON box for {model_name}.{field}")
    with pytest.raises(forms.ValidationError):
        box.clean(NESTED)
    assert box.bound_data(NESTED, None) == NESTED  # the form shown again with its error


def test_a_member_of_several_tenants_names_the_job_s_tenant_on_the_submit_form(
        client, tenant_physics, tenant_chemistry, resource_group, two_nodes):
    """The form had no tenant, and the API refused every job of a member of two tenants ("name one
    in 'tenant'"): such a member could not submit from the page at all."""
    alice = tenant_physics.memberships.first().user
    Membership.objects.create(user=alice, tenant=tenant_chemistry)
    client.force_login(alice)
    assert '<option value="chemistry">chemistry</option>' in client.get("/jobs/new/").content.decode()
    form = {"resource_group": resource_group.name, "vcluster": "hpc", "nodes": 1, "gpus_per_node": 8,
            "preemption_class": 3, "checkpoint": "none", "command": "sleep 5", "action": "submit"}
    page = client.post("/jobs/new/", form)
    assert page.status_code == 200 and "This field is required" in page.content.decode()
    assert not Allocation.objects.exists()
    assert client.post("/jobs/new/", {**form, "tenant": "chemistry"}).status_code == 302
    assert Allocation.objects.get().tenant == tenant_chemistry
    assert client.post("/jobs/new/", {**form, "tenant": "biology"}).status_code == 200  # not one of hers
    assert Allocation.objects.count() == 1


def test_a_member_of_one_tenant_is_not_asked_for_it(client, tenant_physics, resource_group, two_nodes):
    client.force_login(tenant_physics.memberships.first().user)
    assert 'name="tenant"' not in client.get("/jobs/new/").content.decode()
