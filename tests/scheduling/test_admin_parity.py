"""The admin refuses what the operators' API refuses: a vCluster, a session type or a node stays in
its resource group (its nodes, allocations and decisions are the group's; moving it would split
them), and a node's state changes through drain and undrain, not as a field."""

from __future__ import annotations

import json

import pytest

from nodes.models import Node
from scheduling.models import PolicyChange, ResourceGroup, SessionType, VCluster

pytestmark = pytest.mark.django_db


@pytest.fixture
def operator_client(client, django_user_model):
    client.force_login(django_user_model.objects.create_superuser("root", password="pw-root-123"))
    return client


def test_a_vcluster_cannot_be_moved_to_another_group_in_the_admin(operator_client, resource_group, vcluster_hpc):
    other = ResourceGroup.objects.create(name="rg-other", policy={"kind": "class_cost"})
    url = f"/admin/scheduling/vcluster/{vcluster_hpc.pk}/change/"
    response = operator_client.post(url, {
        "resource_group": other.pk, "name": "hpc", "type": "hpc_batch", "max_borrow_pct": "0.3",
        "weights": "{}", "change_reason": "move it"})
    assert response.status_code in (200, 302)
    assert VCluster.objects.get(pk=vcluster_hpc.pk).resource_group_id == resource_group.pk
    # The form still edits the rest.
    assert VCluster.objects.get(pk=vcluster_hpc.pk).max_borrow_pct == pytest.approx(0.3)
    assert 'name="resource_group"' not in operator_client.get(url).content.decode()


def test_a_session_type_cannot_be_moved_to_another_group_in_the_admin(operator_client, resource_group):
    st = SessionType.objects.create(resource_group=resource_group, name="interactive", priority=5)
    other = ResourceGroup.objects.create(name="rg-other", policy={"kind": "class_cost"})
    page = operator_client.get(f"/admin/scheduling/sessiontype/{st.pk}/change/")
    form = page.context["adminform"].form
    data = {name: value for name, value in form.initial.items() if value is not None and value is not False}
    data.update({"resource_group": other.pk, "change_reason": "move it", "preempts": "[]"})
    response = operator_client.post(f"/admin/scheduling/sessiontype/{st.pk}/change/", data)
    assert response.status_code == 302, response.context["adminform"].form.errors
    assert SessionType.objects.get(pk=st.pk).resource_group_id == resource_group.pk


def test_a_new_vcluster_still_chooses_its_group(operator_client, resource_group):
    response = operator_client.post("/admin/scheduling/vcluster/add/", {
        "resource_group": resource_group.pk, "name": "ml", "type": "ml_training", "max_borrow_pct": "0.3",
        "weights": "{}", "change_reason": "new team"})
    assert response.status_code == 302
    assert VCluster.objects.get(name="ml").resource_group_id == resource_group.pk
    assert PolicyChange.objects.get().action == "create"


def _node_form(client, node) -> tuple[str, dict]:
    """The node's change form as the admin renders it, every field at its value."""
    url = f"/admin/nodes/node/{node.pk}/change/"
    form = client.get(url).context["adminform"].form
    data = {}
    for name, field in form.fields.items():
        value = form.initial.get(name, field.initial)
        if value is None or value is False:
            continue
        data[name] = "on" if value is True else (json.dumps(value) if isinstance(value, dict | list) else value)
    return url, data


def test_a_drained_node_goes_back_to_work_only_through_undrain(operator_client, node_gpu_a):
    """The API has no way to set a node's state: drain and undrain are audited actions, and a
    drain lasts until an undrain (check_invariants holds the system to it). The admin's form
    offered the state as a plain field."""
    Node.objects.filter(pk=node_gpu_a.pk).update(state="drained")
    url, data = _node_form(operator_client, node_gpu_a)
    data.update({"state": "ready", "change_reason": "back to work"})
    response = operator_client.post(url, data)
    assert response.status_code == 302, response.context["adminform"].form.errors
    assert Node.objects.get(pk=node_gpu_a.pk).state == "drained"


def test_a_node_stays_in_its_group_and_its_home_vcluster_is_of_that_group(operator_client, node_gpu_a,
                                                                          resource_group):
    other = ResourceGroup.objects.create(name="rg-other", policy={"kind": "class_cost"})
    foreign = VCluster.objects.create(resource_group=other, name="ext", type="hpc_batch")
    url, data = _node_form(operator_client, node_gpu_a)
    data.update({"resource_group": other.pk, "change_reason": "move it"})
    operator_client.post(url, data)
    assert Node.objects.get(pk=node_gpu_a.pk).resource_group_id == resource_group.pk
    data.update({"vcluster": foreign.pk})
    response = operator_client.post(url, data)
    assert response.status_code == 200 and "vcluster" in response.context["adminform"].form.errors
    assert Node.objects.get(pk=node_gpu_a.pk).vcluster.name == "hpc"


@pytest.mark.parametrize("reason", [None, "", "   ", "x" * 2001])
def test_an_admin_change_needs_a_reason_as_the_api_does(operator_client, resource_group, reason):
    """The API refuses an operator's change without a reason (or with one past 2,000 characters);
    so does the admin, and nothing is stored or audited."""
    data = {"resource_group": resource_group.pk, "name": "ml", "type": "ml_training", "max_borrow_pct": "0.3",
            "weights": "{}", **({} if reason is None else {"change_reason": reason})}
    response = operator_client.post("/admin/scheduling/vcluster/add/", data)
    assert response.status_code == 200 and "change_reason" in response.context["adminform"].form.errors
    assert not VCluster.objects.filter(name="ml").exists() and not PolicyChange.objects.exists()
