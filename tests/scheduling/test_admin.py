"""The admin as an operator uses it: policy edits are per-field, validated and audited."""

from __future__ import annotations

import pytest

from scheduling.forms import POLICY_FIELD_NAMES, PREFIX
from scheduling.models import PolicyChange, ResourceGroup, VCluster

pytestmark = pytest.mark.django_db


def _form_data(group: ResourceGroup, **policy) -> dict:
    data = {"name": group.name, "description": group.description, "change_reason": "tune victims"}
    base = {"kind": "class_cost", "enabled": True, "mode": "suspend", "max_victims": 3,
            "near_completion_minutes": 5, "min_runtime_minutes": 0, "max_preemptions_per_job": "",
            "reclaim_rule": "any", "checkpoint_timeout_minutes": 10, "max_deferral_minutes": 5,
            "preemptible_priority": "",
            "victim_scope": "resource_group", "preemption_order": "newest", "preempt_for": "",
            "no_preempt_run_minutes": "", "no_preempt_finish_minutes": "", "tolerance": 0.8,
            "starvation_timeout_s": 30, "aggressive_starvation_timeout_s": 120,
            "preemption_threshold": 1.0, "aggressive_threshold": 0.2, "preemptive_scheduling_backoff_s": 5,
            "non_preemptible_usage_threshold": 0}
    base.update(policy)
    for key, value in base.items():
        if value is True:
            data[PREFIX + key] = "on"
        elif value is not False:
            data[PREFIX + key] = value
    return data


@pytest.fixture
def admin_client_op(client, django_user_model):
    user = django_user_model.objects.create_superuser("root", password="pw-root-123")
    client.force_login(user)
    return client, user


def test_admin_policy_edit_writes_policy_change(admin_client_op, resource_group):
    client, user = admin_client_op
    url = f"/admin/scheduling/resourcegroup/{resource_group.pk}/change/"
    page = client.get(url)
    assert page.status_code == 200
    for name in POLICY_FIELD_NAMES:
        assert f'name="{PREFIX}{name}"' in page.content.decode()
    response = client.post(url, _form_data(resource_group, max_victims=5))
    assert response.status_code == 302, response.content.decode()[:2000]
    resource_group.refresh_from_db()
    assert resource_group.policy["max_victims"] == 5
    change = PolicyChange.objects.get()
    assert (change.actor, change.action, change.reason) == (user, "edit", "tune victims")
    assert change.before["policy"] == {"kind": "class_cost"}
    assert change.after["policy"]["max_victims"] == 5


def test_admin_refuses_bad_combination_and_changes_nothing(admin_client_op, resource_group):
    client, _ = admin_client_op
    url = f"/admin/scheduling/resourcegroup/{resource_group.pk}/change/"
    response = client.post(url, _form_data(resource_group, kind="fair_share", aggressive_threshold=0.9,
                                           preemption_threshold=0.5))
    assert response.status_code == 200
    assert "must not be above preemption_threshold" in response.content.decode()
    resource_group.refresh_from_db()
    assert resource_group.policy == {"kind": "class_cost"}
    assert not PolicyChange.objects.exists()


def test_admin_vcluster_create_and_delete_are_audited(admin_client_op, resource_group):
    client, _ = admin_client_op
    response = client.post("/admin/scheduling/vcluster/add/", {
        "resource_group": resource_group.pk, "name": "ml", "type": "ml_training", "allow_lending": "on",
        "allow_borrowing": "on", "max_borrow_pct": "0.3", "weights": "{}", "change_reason": "new team"})
    assert response.status_code == 302
    vc = VCluster.objects.get(name="ml")
    client.post(f"/admin/scheduling/vcluster/{vc.pk}/delete/", {"post": "yes"})
    assert list(PolicyChange.objects.order_by("id").values_list("action", "target_repr")) == [
        ("create", "rg-main/ml"), ("delete", "rg-main/ml")]


def test_policy_changes_are_append_only(resource_group):
    change = PolicyChange.objects.create(action="edit", target_type="x", target_id="1", target_repr="x")
    change.reason = "rewrite history"
    with pytest.raises(ValueError):
        change.save()


def test_allocations_are_read_only_in_the_admin(admin_client_op, make_allocation):
    client, _ = admin_client_op
    alloc = make_allocation(state="running", preemption_class=1)
    page = client.get(f"/admin/scheduling/allocation/{alloc.pk}/change/")
    assert page.status_code == 200 and b'name="preemption_class"' not in page.content
    client.post(f"/admin/scheduling/allocation/{alloc.pk}/change/", {"preemption_class": 9})
    alloc.refresh_from_db()
    assert alloc.preemption_class == 1
    assert client.get("/admin/scheduling/allocation/add/").status_code == 403


@pytest.mark.parametrize("field, value", [("tolerance", "٠.٨"), ("max_victims", "٥")])
def test_admin_policy_numbers_are_ascii_digits(admin_client_op, resource_group, field, value):
    client, _ = admin_client_op
    url = f"/admin/scheduling/resourcegroup/{resource_group.pk}/change/"
    page = client.post(url, _form_data(resource_group, kind="fair_share", **{field: value}))
    assert page.status_code == 200
    assert PREFIX + field in page.context["adminform"].form.errors
    resource_group.refresh_from_db()
    assert resource_group.policy == {"kind": "class_cost"}
    assert not PolicyChange.objects.exists()


def test_a_job_s_history_and_preemption_records_cannot_be_added_or_deleted_in_the_admin(
        admin_client_op, make_allocation, resource_group):
    """They are what happened, written by the actions: an operator (with every model permission of
    the app) could add a line to a tenant's job history, delete one, or delete the record that
    explains a preemption, without an audit entry."""
    from django.utils import timezone

    from scheduling.models import AllocationEvent, PreemptionDecision

    client, _ = admin_client_op
    alloc = make_allocation(state="running")
    event = AllocationEvent.objects.create(allocation=alloc, from_state="pending", to_state="running")
    record = PreemptionDecision.objects.create(
        resource_group=resource_group, preemptor=alloc, decided_for=timezone.now(), result="preempt",
        code="PREEMPT", explanation="x", outcome="executed", victims=[])
    assert client.get("/admin/scheduling/allocationevent/add/").status_code == 403
    client.post("/admin/scheduling/allocationevent/add/", {
        "allocation": alloc.pk, "from_state": "running", "to_state": "failed", "reason": "forged"})
    for url in (f"/admin/scheduling/allocationevent/{event.pk}/delete/",
                f"/admin/scheduling/preemptiondecision/{record.pk}/delete/"):
        assert client.get(url).status_code == 403
        client.post(url, {"post": "yes"})
    listing = "/admin/scheduling/allocationevent/"
    client.post(listing, {"action": "delete_selected", "_selected_action": [event.pk], "post": "yes"})
    assert list(AllocationEvent.objects.filter(allocation=alloc)) == [event]
    assert PreemptionDecision.objects.filter(pk=record.pk).exists()


def test_a_node_s_capacity_is_not_lowered_below_what_its_live_work_holds(admin_client_op, make_allocation,
                                                                         two_nodes):
    """Below it, the node was over capacity (``check_invariants`` said so) with the work still on it."""
    from nodes.models import Node
    from scheduling.models import Placement

    client, _ = admin_client_op
    node = two_nodes[0]
    running = make_allocation(state="running", per_node_gpu=6)
    Placement.objects.create(allocation=running, node=node, gpu=6, cpu=8)
    form = {"name": node.name, "vcluster": node.vcluster_id, "gpu": 4, "cpu": 64, "memory": 512,
            "labels": '{"switch": "s1"}', "gpu_max_temperature_c": 90, "gpu_max_ecc_uncorrectable": 0,
            "gpu_xids": "", "change_reason": "two GPUs out"}
    url = f"/admin/nodes/node/{node.pk}/change/"
    refused = client.post(url, form)
    assert refused.status_code == 200
    assert "6 are held on this node now" in str(refused.context["adminform"].form.errors["gpu"])
    assert Node.objects.get(pk=node.pk).gpu == 8 and not PolicyChange.objects.exists()
    assert client.post(url, {**form, "gpu": 6}).status_code == 302  # what it holds is still fine
    running.state = "completed"
    running.save(update_fields=["state"])
    assert client.post(url, form).status_code == 302  # its work has left
    assert Node.objects.get(pk=node.pk).gpu == 4


def test_a_node_is_named_when_added_never_after(admin_client_op, two_nodes):
    """Its name is its agents' channel-layer group: renamed, its connected agent heard none of its
    commands, and a node added under the old name had its commands sent to that agent."""
    from nodes.models import Node

    client, _ = admin_client_op
    node = two_nodes[0]
    form = {"name": "gpu-z", "vcluster": node.vcluster_id, "gpu": 8, "cpu": 64, "memory": 512,
            "labels": '{"switch": "s1"}', "gpu_max_temperature_c": 90, "gpu_max_ecc_uncorrectable": 0,
            "gpu_xids": "", "change_reason": "re-labelled"}
    assert client.post(f"/admin/nodes/node/{node.pk}/change/", form).status_code == 302
    assert Node.objects.get(pk=node.pk).name == node.name
    assert client.post("/admin/nodes/node/add/", {**form, "resource_group": node.resource_group_id}).status_code == 302
    assert Node.objects.filter(name="gpu-z").exists()  # named when added
