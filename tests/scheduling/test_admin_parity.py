"""The admin refuses what the operators' API refuses: a vCluster or a session type stays in its
resource group (its nodes, allocations and decisions are the group's; moving it would split them)."""

from __future__ import annotations

import pytest

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
