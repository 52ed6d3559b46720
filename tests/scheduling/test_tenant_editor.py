"""The console's tenant editor (/ops/tenants/NAME/): the Backend.AI priority policy of a tenant
and of each member, its fair share and GPU-hours budget; previewed without saving, refused field
by field, saved with a reason and audited, and then applied by admission to the next submission
over REST."""

from __future__ import annotations

import pytest

from scheduling.models import Allocation, Membership, PolicyChange, Quota

pytestmark = pytest.mark.django_db

URL = "/ops/tenants/physics/"


def _form(**changes):
    """The editor's POST as the page sends it, for physics (quota) and alice (its one member)."""
    alice = Membership.objects.get(user__username="alice")
    data = {"default_priority": "10", "priority_changeable": "on", "min_priority": "0", "max_priority": "100",
            "fair_share": "0.5", "gpu_hours_budget": "", "reason": "",
            "m-TOTAL_FORMS": "1", "m-INITIAL_FORMS": "1", "m-MIN_NUM_FORMS": "0", "m-MAX_NUM_FORMS": "1000",
            "m-0-id": str(alice.pk), "m-0-default_priority": "", "m-0-priority_changeable": "on",
            "m-0-min_priority": "", "m-0-max_priority": ""}
    for key, value in changes.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    return data


def test_only_operators_reach_it(client, tenant_physics, operator):
    client.force_login(Membership.objects.get(user__username="alice").user)
    assert client.get(URL).status_code == 403
    assert client.get("/ops/tenants/").status_code == 403
    client.force_login(operator)
    page = client.get("/ops/tenants/").content.decode()
    assert 'href="/ops/tenants/physics/"' in page and "10 unless named; may name 0..100" in page
    assert client.get("/ops/tenants/nobody/").status_code == 404


def test_preview_shows_each_members_policy_and_stores_nothing(client, tenant_physics, operator,
                                                              make_allocation):
    make_allocation(state="pending", priority=40)  # alice's, at 40
    client.force_login(operator)
    response = client.post(URL, _form(**{"max_priority": "30", "m-0-priority_changeable": None,
                                         "gpu_hours_budget": "100", "action": "preview"}))
    assert response.status_code == 200
    page = response.content.decode()
    assert "10 unless named; may name 0..100 → <b>always 10 (may not change it)</b>" in page
    assert "priority 40) keeps its priority" in page
    assert "no budget: no penalty" in page and "100 GPU-hours, 0% used: score x 1.00" in page
    quota = Quota.objects.get(tenant=tenant_physics)
    assert (quota.max_priority, quota.gpu_hours_budget) == (100, None)
    assert Membership.objects.get(user__username="alice").priority_changeable is True
    assert not PolicyChange.objects.exists()


def test_invalid_values_are_named_by_field_and_nothing_is_saved(client, tenant_physics, operator):
    client.force_login(operator)
    response = client.post(URL, _form(**{"default_priority": "60", "max_priority": "50", "m-0-min_priority": "9",
                                         "m-0-max_priority": "3", "reason": "try", "action": "save"}))
    assert response.status_code == 200
    form, formset = response.context["form"], response.context["formset"]
    assert "default_priority" in form.errors
    assert "min_priority" in formset.forms[0].errors
    assert 'class="field invalid"' in response.content.decode()
    response = client.post(URL, _form(**{"fair_share": "1.5", "action": "preview"}))
    assert "fair_share" in response.context["form"].errors
    assert Quota.objects.get(tenant=tenant_physics).default_priority == 10
    assert not PolicyChange.objects.exists()


def test_saving_needs_a_reason_is_audited_and_admission_applies_it(client, tenant_physics, operator,
                                                                   resource_group, node_gpu_a):
    client.force_login(operator)
    change = {"default_priority": "20", "min_priority": "5", "max_priority": "60", "m-0-max_priority": "25",
              "action": "save"}
    refused = client.post(URL, _form(**change))
    assert refused.status_code == 200 and "reason" in refused.context["form"].errors
    assert client.post(URL, _form(**change, reason="physics gets its own range")).status_code == 302
    entries = {e.target_type: e for e in PolicyChange.objects.all()}
    assert set(entries) == {"scheduling.quota", "scheduling.membership"}
    quota_entry = entries["scheduling.quota"]
    assert (quota_entry.before["default_priority"], quota_entry.after["default_priority"]) == (10, 20)
    assert quota_entry.reason == "physics gets its own range" and quota_entry.actor == operator
    assert (entries["scheduling.membership"].before["max_priority"],
            entries["scheduling.membership"].after["max_priority"]) == (None, 25)

    alice = client
    alice.force_login(Membership.objects.get(user__username="alice").user)
    job = {"resource_group": "rg-main", "vcluster": "hpc", "per_node": {"gpu": 1}, "command": ["run"]}
    made = alice.post("/api/v1/allocations/", job, content_type="application/json")
    assert made.status_code == 201 and Allocation.objects.get(pk=made.json()["id"]).priority == 20
    over = alice.post("/api/v1/allocations/", {**job, "priority": 30}, content_type="application/json")
    assert over.status_code == 400 and "5..25" in over.json()["priority"][0]
