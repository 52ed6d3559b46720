"""Policy evaluations through the API: operators only, bad input a 400 naming the field with
nothing started, one at a time (409 naming the one that runs), cancel, the report once done, and
a policy saved with ``evaluation`` keeping it with the audit entry as the console's editor does."""

from __future__ import annotations

import pytest
from django.utils import timezone

from scheduling.evaluations import evaluation_run
from scheduling.models import PolicyChange, PolicyEvaluation, ResourceGroup
from tests.scheduling.evaluation_helpers import record_history

pytestmark = pytest.mark.django_db

URL = "/api/v1/evaluations/"
EDITED = {"kind": "class_cost", "max_victims": 1}


@pytest.fixture
def ops(client, operator):
    client.force_login(operator)
    return client


def _start(client, group, policy=EDITED, **fields):
    return client.post(URL, {"resource_group": group.name, "policy": policy, **fields},
                       content_type="application/json")


def test_an_operator_evaluates_a_policy_and_reads_the_report(ops, resource_group, node_gpu_a, tenant_physics):
    record_history(resource_group, [tenant_physics], 10)
    started = _start(ops, resource_group, days=3)
    assert started.status_code == 202, started.content
    body = started.json()
    assert (body["status"], body["days"], body["resource_group"]) == ("queued", 3, resource_group.name)
    assert body["candidate_policy"] == EDITED and body["current_policy"] == resource_group.policy
    evaluation_run(body["id"])
    done = ops.get(f"{URL}{body['id']}/").json()
    assert done["status"] == "done"
    assert done["jobs_total"] > 0 and done["jobs_done"] == done["jobs_total"]
    assert done["report"]["trace"]["jobs"] == 10  # the ten recorded allocations, replayed
    listed = ops.get(URL, {"resource_group": resource_group.name}).json()["results"]
    assert [row["id"] for row in listed] == [body["id"]]
    assert "report" not in listed[0]
    ResourceGroup.objects.create(name="another", policy={"kind": "class_cost"})
    assert ops.get(URL, {"resource_group": "another"}).json()["results"] == []
    assert list(ops.get(URL, {"resource_group": "none-such"}).json()) == ["resource_group"]  # a 400


def test_bad_input_is_a_400_naming_the_field_and_starts_nothing(ops, resource_group):
    cases = [
        ({"resource_group": resource_group.name, "policy": {"kind": "class_cost", "max_victims": -1}}, "policy"),
        ({"resource_group": resource_group.name, "policy": EDITED, "days": 0}, "days"),
        ({"resource_group": resource_group.name, "policy": EDITED, "days": 31}, "days"),
        ({"resource_group": "missing", "policy": EDITED}, "resource_group"),
        ({"resource_group": resource_group.name, "policy": [1]}, "policy"),
        ({"resource_group": resource_group.name, "policy": EDITED, "dayz": 3}, "dayz"),
    ]
    for body, field in cases:
        answer = ops.post(URL, body, content_type="application/json")
        assert answer.status_code == 400, body
        assert field in answer.json(), (body, answer.json())
    assert not PolicyEvaluation.objects.exists()


def test_a_second_evaluation_is_refused_naming_the_first_until_it_is_cancelled(ops, resource_group):
    first = _start(ops, resource_group).json()["id"]
    refused = _start(ops, resource_group)
    assert refused.status_code == 409
    assert f"evaluation #{first}" in refused.json()["detail"]
    cancelled = ops.post(f"{URL}{first}/cancel/")
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    assert _start(ops, resource_group).status_code == 202


def test_tenants_are_refused_every_evaluation_call(client, operator, resource_group, tenant_physics):
    client.force_login(operator)
    existing = _start(client, resource_group).json()["id"]
    client.force_login(tenant_physics.memberships.first().user)
    assert client.get(URL).status_code == 403
    assert client.get(f"{URL}{existing}/").status_code == 403
    assert _start(client, resource_group).status_code == 403
    assert client.post(f"{URL}{existing}/cancel/").status_code == 403
    assert PolicyEvaluation.objects.get().status == "queued"


def test_a_policy_saved_with_its_evaluation_keeps_it_while_the_baseline_holds(
        ops, resource_group, node_gpu_a, tenant_physics):
    record_history(resource_group, [tenant_physics], 10)
    first = _start(ops, resource_group).json()["id"]
    evaluation_run(first)
    put = f"/api/v1/resource-groups/{resource_group.name}/policy/"
    saved = ops.put(put, {"policy": EDITED, "reason": "evaluated", "evaluation": first},
                    content_type="application/json")
    assert saved.status_code == 200, saved.content
    change = PolicyChange.objects.filter(reason="evaluated").get()
    assert PolicyEvaluation.objects.get(pk=first).policy_change == change
    # A second evaluation, then another change in between: its baseline is gone, nothing is kept.
    second = _start(ops, resource_group, policy={"kind": "class_cost", "max_victims": 2}).json()["id"]
    evaluation_run(second)
    ops.put(put, {"policy": {"kind": "class_cost", "max_victims": 3}, "reason": "in between"},
            content_type="application/json")
    ops.put(put, {"policy": {"kind": "class_cost", "max_victims": 2}, "reason": "late", "evaluation": second},
            content_type="application/json")
    assert ResourceGroup.objects.get(pk=resource_group.pk).policy["max_victims"] == 2
    assert PolicyEvaluation.objects.get(pk=second).policy_change is None


def test_a_policy_saved_naming_an_evaluation_the_group_does_not_have_is_a_400_and_changes_nothing(
        ops, resource_group, node_gpu_a, tenant_physics):
    other = ResourceGroup.objects.create(name="rg-other")
    theirs = PolicyEvaluation.objects.create(resource_group=other, days=1, since=timezone.now(), until=timezone.now(),
                                             current_policy={}, candidate_policy=EDITED)
    before = ResourceGroup.objects.get(pk=resource_group.pk).policy
    put = f"/api/v1/resource-groups/{resource_group.name}/policy/"
    for evaluation in (theirs.pk, theirs.pk + 1000):
        refused = ops.put(put, {"policy": EDITED, "reason": "r", "evaluation": evaluation}, content_type="application/json")
        assert refused.status_code == 400 and refused.json()["evaluation"] == [
            f"no evaluation #{evaluation} of {resource_group.name}"]
    assert ResourceGroup.objects.get(pk=resource_group.pk).policy == before and not PolicyChange.objects.exists()
