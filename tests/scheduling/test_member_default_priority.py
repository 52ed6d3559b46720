"""A member's own default priority lies within the range its policy lets it name (the tenant's
range narrowed by its own), in every path that writes it: the API, the console's tenant editor
and the admin. An empty range stays allowed (its member names nothing and gets the default), and
submission never hands out a default the member could not name."""

from __future__ import annotations

import pytest

from scheduling.models import Allocation, Membership, PolicyChange, Quota, Tenant

pytestmark = pytest.mark.django_db

JOB = {"resource_group": "rg-main", "vcluster": "hpc", "per_node": {"gpu": 1}, "command": ["run"]}


@pytest.fixture
def alice_member(tenant_physics):
    Quota.objects.filter(tenant=tenant_physics).update(min_priority=5, max_priority=60, default_priority=20)
    return Membership.objects.get(user__username="alice")


def _patch(client, member, body):
    return client.patch(f"/api/v1/memberships/{member.pk}/", {**body, "reason": "r"},
                        content_type="application/json")


@pytest.mark.parametrize("body", [
    {"default_priority": 70},  # above the tenant's 5..60
    {"default_priority": 2},  # below it
    {"default_priority": 40, "max_priority": 30},  # above the member's own 5..30
    {"default_priority": 8, "min_priority": 10},
])
def test_the_api_refuses_a_default_outside_the_members_range(client, operator, alice_member, body):
    client.force_login(operator)
    response = _patch(client, alice_member, body)
    assert response.status_code == 400, response.content
    assert "default_priority" in response.json()
    stored = Membership.objects.get(pk=alice_member.pk)
    assert (stored.default_priority, stored.min_priority, stored.max_priority) == (None, None, None)
    assert not PolicyChange.objects.exists()


def test_the_api_takes_a_default_within_the_range_or_with_an_empty_one(client, operator, alice_member):
    client.force_login(operator)
    assert _patch(client, alice_member, {"default_priority": 30, "max_priority": 30}).status_code == 200
    # The member's own range outside the tenant's: empty, allowed on purpose, any default.
    empty = _patch(client, alice_member, {"default_priority": 90, "min_priority": 70, "max_priority": 80})
    assert empty.status_code == 200, empty.content
    assert Membership.objects.get(pk=alice_member.pk).default_priority == 90


def _editor_post(member, **changes):
    data = {"default_priority": "20", "priority_changeable": "on", "min_priority": "5", "max_priority": "60",
            "fair_share": "0.5", "gpu_hours_budget": "", "reason": "why", "action": "save",
            "m-TOTAL_FORMS": "1", "m-INITIAL_FORMS": "1", "m-MIN_NUM_FORMS": "0", "m-MAX_NUM_FORMS": "1000",
            "m-0-id": str(member.pk), "m-0-default_priority": "", "m-0-priority_changeable": "on",
            "m-0-min_priority": "", "m-0-max_priority": ""}
    data.update(changes)
    return data


def test_the_tenant_editor_refuses_it_against_the_range_as_edited(client, operator, alice_member):
    client.force_login(operator)
    url = "/ops/tenants/physics/"
    refused = client.post(url, _editor_post(alice_member, **{"m-0-default_priority": "50",
                                                              "m-0-max_priority": "40"}))
    assert refused.status_code == 200
    assert "default_priority" in refused.context["formset"].forms[0].errors
    assert 'class="field invalid"' in refused.content.decode()
    # Within the stored range, outside the one this post gives the tenant: refused too.
    narrowed = client.post(url, _editor_post(alice_member, max_priority="40", **{"m-0-default_priority": "50"}))
    assert narrowed.status_code == 200 and "default_priority" in narrowed.context["formset"].forms[0].errors
    assert Membership.objects.get(pk=alice_member.pk).default_priority is None
    assert Quota.objects.get(tenant=alice_member.tenant_id).max_priority == 60
    assert not PolicyChange.objects.exists()
    # Outside the stored range, within the one this post gives the tenant: saved.
    widened = client.post(url, _editor_post(alice_member, max_priority="90", **{"m-0-default_priority": "80"}))
    assert widened.status_code == 302
    assert Membership.objects.get(pk=alice_member.pk).default_priority == 80


def test_the_admin_refuses_it(client, django_user_model, alice_member):
    client.force_login(django_user_model.objects.create_superuser("root", password="pw-root-123"))
    url = f"/admin/scheduling/membership/{alice_member.pk}/change/"
    data = {"user": alice_member.user_id, "tenant": alice_member.tenant_id, "role": "member",
            "default_priority": "70", "priority_changeable": "on", "min_priority": "", "max_priority": "",
            "unix_user": "", "unix_group": "", "change_reason": "try"}
    refused = client.post(url, data)
    assert refused.status_code == 200
    assert "default_priority" in refused.context["adminform"].form.errors
    assert Membership.objects.get(pk=alice_member.pk).default_priority is None
    assert client.post(url, {**data, "default_priority": "50"}).status_code == 302
    assert Membership.objects.get(pk=alice_member.pk).default_priority == 50


def test_submission_never_hands_out_a_default_the_member_could_not_name(api_for, alice_member, node_gpu_a):
    # Stored before the tenant's range narrowed (no check then): 70, while the member may name 5..60.
    Membership.objects.filter(pk=alice_member.pk).update(default_priority=70)
    alice = api_for("alice")
    made = alice.post("/api/v1/allocations/", JOB, content_type="application/json")
    assert made.status_code == 201, made.content
    assert Allocation.objects.get(pk=made.json()["id"]).priority == 60  # the nearest it may name
    named = alice.post("/api/v1/allocations/", {**JOB, "priority": 70}, content_type="application/json")
    assert named.status_code == 400 and "5..60" in named.json()["priority"][0]
    # The tenant's default (20) inherited by a member whose own range is 30..40: it gets 30.
    Membership.objects.filter(pk=alice_member.pk).update(default_priority=None, min_priority=30, max_priority=40)
    made = alice.post("/api/v1/allocations/", JOB, content_type="application/json")
    assert Allocation.objects.get(pk=made.json()["id"]).priority == 30


def _tenant_admin_post(client, tenant):
    """The admin's tenant page (the tenant, its quota and its members in one form) as it posts it."""
    url = f"/admin/scheduling/tenant/{tenant.pk}/change/"
    page = client.get(url)
    data = {name: value for name, value in page.context["adminform"].form.initial.items() if value}
    for inline in page.context["inline_admin_formsets"]:
        formset = inline.formset
        data.update({f"{formset.prefix}-{k}": v for k, v in formset.management_form.initial.items()})
        for form in formset.forms:
            for name in form.fields:
                value = form[name].value()
                if value is True:
                    data[f"{form.prefix}-{name}"] = "on"
                elif value not in (None, False):
                    data[f"{form.prefix}-{name}"] = value
    data["change_reason"] = "both at once"
    return url, data


def test_the_admin_s_tenant_page_checks_it_against_the_range_as_the_same_post_edits_it(
        client, django_user_model, alice_member):
    """The tenant's quota and its members are edited in one post there, as in the console's
    tenant editor: a member's default is judged against the tenant's range as saved by that post."""
    client.force_login(django_user_model.objects.create_superuser("root", password="pw-root-123"))
    tenant = alice_member.tenant
    url, data = _tenant_admin_post(client, tenant)
    # Within the stored 5..60, outside the 5..40 this post gives the tenant: refused.
    refused = client.post(url, {**data, "quota-0-max_priority": "40", "memberships-0-default_priority": "50"})
    assert refused.status_code == 200
    [members] = [i.formset for i in refused.context["inline_admin_formsets"] if i.formset.prefix == "memberships"]
    assert "default_priority" in members.forms[0].errors
    assert Membership.objects.get(pk=alice_member.pk).default_priority is None
    assert Quota.objects.get(tenant=tenant).max_priority == 60
    # Outside the stored range, within the 5..90 this post gives the tenant: saved.
    saved = client.post(url, {**data, "quota-0-max_priority": "90", "memberships-0-default_priority": "80"})
    assert saved.status_code == 302
    assert Membership.objects.get(pk=alice_member.pk).default_priority == 80
    assert Quota.objects.get(tenant=tenant).max_priority == 90


def test_the_admin_s_tenant_page_judges_a_member_s_root_mapping_by_the_allow_root_it_posts(
        client, django_user_model, alice_member):
    """The tenant's allow_root and its members' mappings are edited in one post there: a member
    mapped to root is judged against the leave as that post sets it, not as stored (taking the
    leave away while mapping a member to root saved both, and the member's work was refused at
    every start)."""
    client.force_login(django_user_model.objects.create_superuser("root", password="pw-root-123"))
    tenant = alice_member.tenant
    Tenant.objects.filter(pk=tenant.pk).update(allow_root=True)
    url, data = _tenant_admin_post(client, tenant)
    data.pop("allow_root")
    refused = client.post(url, {**data, "memberships-0-unix_user": "root"})
    assert refused.status_code == 200
    [members] = [i.formset for i in refused.context["inline_admin_formsets"] if i.formset.prefix == "memberships"]
    assert "allow_root" in str(members.forms[0].errors["unix_user"])
    assert Membership.objects.get(pk=alice_member.pk).unix_user == "" and Tenant.objects.get(pk=tenant.pk).allow_root
    # The leave given in the same post as the mapping: saved.
    Tenant.objects.filter(pk=tenant.pk).update(allow_root=False)
    saved = client.post(url, {**data, "allow_root": "on", "memberships-0-unix_user": "root"})
    assert saved.status_code == 302
    assert Membership.objects.get(pk=alice_member.pk).unix_user == "root" and Tenant.objects.get(pk=tenant.pk).allow_root
