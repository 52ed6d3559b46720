"""Every console editor that saves with a reason holds it to the limit the API holds it to
(``REASON_MAX_LENGTH``): the group's policy editor, a vCluster's editor and the tenant editor
took a reason of any length, kept whole in the audit log, that the API refuses."""

from __future__ import annotations

import pytest

from scheduling.models import REASON_MAX_LENGTH, PolicyChange, ResourceGroup, VCluster
from tests.scheduling.test_pages import POLICY, _vcluster_form
from tests.scheduling.test_tenant_editor import _form as tenant_form

pytestmark = pytest.mark.django_db

TOO_LONG = "x" * (REASON_MAX_LENGTH + 1)


def test_the_policy_editor_refuses_a_reason_past_the_limit(client, operator, resource_group):
    client.force_login(operator)
    url = f"/ops/groups/{resource_group.name}/policy/"
    page = client.post(url, {**POLICY, "policy_max_victims": "1", "reason": TOO_LONG, "action": "save"})
    assert page.status_code == 200 and "reason" in page.context["form"].errors
    assert ResourceGroup.objects.get(pk=resource_group.pk).policy == {"kind": "class_cost"}
    assert not PolicyChange.objects.exists()
    # At the limit, it saves.
    saved = client.post(url, {**POLICY, "policy_max_victims": "1", "reason": TOO_LONG[1:], "action": "save"})
    assert saved.status_code == 302


def test_the_vcluster_editor_refuses_a_reason_past_the_limit(client, operator, resource_group, vcluster_hpc):
    client.force_login(operator)
    url = f"/ops/groups/{resource_group.name}/vclusters/{vcluster_hpc.pk}/"
    page = client.post(url, _vcluster_form(max_borrow_pct="0.5", reason=TOO_LONG, action="save"))
    assert page.status_code == 200 and "reason" in page.context["form"].errors
    assert VCluster.objects.get(pk=vcluster_hpc.pk).max_borrow_pct != 0.5
    assert not PolicyChange.objects.exists()


def test_the_tenant_editor_refuses_a_reason_past_the_limit(client, operator, tenant_physics):
    client.force_login(operator)
    page = client.post("/ops/tenants/physics/", tenant_form(default_priority="20", reason=TOO_LONG, action="save"))
    assert page.status_code == 200 and "reason" in page.context["form"].errors
    assert tenant_physics.quota.default_priority == 10
    assert not PolicyChange.objects.exists()
