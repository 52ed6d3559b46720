"""The score's settings: a vCluster's weights and a class_cost policy's borrowed_risk are checked
(400 naming the field, nothing changed), audited, and editable in the console."""

from __future__ import annotations

import pytest

from scheduling.models import PolicyChange, ResourceGroup, VCluster

pytestmark = pytest.mark.django_db


@pytest.fixture
def ops(client, operator):
    client.force_login(operator)
    return client


def _patch(client, path, body):
    return client.patch(path, body, content_type="application/json")


@pytest.mark.parametrize("weights", [{"w10": 0.1}, {"w8": 1.5}, {"w8": "high"}, [0.1]])
def test_bad_weights_are_refused_naming_the_field(ops, vcluster_hpc, weights):
    refused = _patch(ops, f"/api/v1/vclusters/{vcluster_hpc.pk}/", {"weights": weights, "reason": "tune"})
    assert refused.status_code == 400 and "weights" in refused.json(), refused.content
    assert VCluster.objects.get(pk=vcluster_hpc.pk).weights == {}
    assert not PolicyChange.objects.exists()


def test_weights_are_saved_with_an_audit_entry_and_used_over_the_defaults(ops, vcluster_hpc):
    done = _patch(ops, f"/api/v1/vclusters/{vcluster_hpc.pk}/", {"weights": {"w8": 0.3, "w9": 0.1},
                                                                 "reason": "checkpointing matters here"})
    assert done.status_code == 200, done.content
    stored = VCluster.objects.get(pk=vcluster_hpc.pk)
    assert stored.effective_weights()["w8"] == 0.3 and stored.effective_weights()["w1"] == 0.25
    assert PolicyChange.objects.get().after["weights"] == {"w8": 0.3, "w9": 0.1}


def test_borrowed_risk_is_a_checked_and_audited_policy_field(ops, resource_group):
    url = "/api/v1/resource-groups/rg-main/policy/"
    refused = ops.put(url, {"policy": {"kind": "class_cost", "borrowed_risk": 2}, "reason": "r"},
                      content_type="application/json")
    assert refused.status_code == 400 and "borrowed_risk" in refused.json()["policy"], refused.content
    done = ops.put(url, {"policy": {"kind": "class_cost", "borrowed_risk": 0.5}, "reason": "guests pay less"},
                   content_type="application/json")
    assert done.status_code == 200, done.content
    assert ResourceGroup.objects.get(pk=resource_group.pk).policy["borrowed_risk"] == 0.5
    assert PolicyChange.objects.get().after["policy"]["borrowed_risk"] == 0.5
    page = ops.get("/ops/groups/rg-main/policy/").content.decode()
    assert 'name="policy_borrowed_risk"' in page and 'value="0.5"' in page
