"""The seed models' settings in the console's forms (Django client): the session type's Symphony
rank range and LSF preemption limit, the vCluster's YTsaurus aggressive-preemption switch and the
LSF policy fields; each previewed, refused by field, saved with a reason and audited, and then in
force where it applies."""

from __future__ import annotations

import pytest

from scheduling.models import PolicyChange, ResourceGroup, SessionType, VCluster

from .seed_e2e import client_for, nodes, submit
from .test_pages import POLICY, _vcluster_form

pytestmark = pytest.mark.django_db

SESSION = {"priority": "5", "rank": "5", "scope": "lower_or_equal", "criteria": "most_over_allocated",
           "default_class": "0", "mode": "", "preempts": "[]", "rank_min": "", "rank_max": "",
           "max_preemptions_per_job": "", "reason": ""}


def test_session_type_rank_range_and_preemption_limit(resource_group, vcluster_hpc, tenant_physics, operator):
    nodes(resource_group, vcluster_hpc, 1)
    svc = SessionType.objects.create(resource_group=resource_group, name="svc", rank=5)
    op = client_for("op")
    url = f"/ops/groups/{resource_group.name}/session-types/{svc.pk}/"
    assert b'name="rank_min"' in op.get(url).content and b'name="max_preemptions_per_job"' in op.get(url).content
    bad = op.post(url, {**SESSION, "rank_min": "7", "max_preemptions_per_job": "-1", "reason": "r",
                        "action": "save"})
    assert bad.status_code == 200
    assert {"rank_min", "max_preemptions_per_job"} <= set(bad.context["form"].errors)
    assert not PolicyChange.objects.exists()
    preview = op.post(url, {**SESSION, "rank_min": "1", "rank_max": "9", "action": "preview"})
    assert b"Preview on the current state" in preview.content
    assert SessionType.objects.get(pk=svc.pk).rank_max is None
    saved = op.post(url, {**SESSION, "rank_min": "1", "rank_max": "9", "max_preemptions_per_job": "2",
                          "reason": "sessions pick their rank", "action": "save"})
    assert saved.status_code == 302
    change = PolicyChange.objects.get()
    assert (change.before["rank_max"], change.after["rank_max"], change.after["max_preemptions_per_job"]) == (
        None, 9, 2)
    alice = client_for("alice")
    assert submit(alice, session_type="svc", per_node={"gpu": 1}, rank=9).status_code == 201
    assert "rank" in submit(alice, session_type="svc", per_node={"gpu": 1}, rank=10).json()


def test_vcluster_aggressive_preemption_switch(resource_group, vcluster_hpc, operator):
    op = client_for("op")
    url = f"/ops/groups/{resource_group.name}/vclusters/{vcluster_hpc.pk}/"
    assert b'name="allow_aggressive_preemption"' in op.get(url).content
    saved = op.post(url, _vcluster_form(reason="production SLAs", action="save"))  # the box left unticked
    assert saved.status_code == 302
    assert VCluster.objects.get(pk=vcluster_hpc.pk).allow_aggressive_preemption is False
    change = PolicyChange.objects.get()
    assert (change.before["allow_aggressive_preemption"], change.after["allow_aggressive_preemption"]) == (
        True, False)


def test_lsf_policy_fields(resource_group, operator):
    op = client_for("op")
    url = f"/ops/groups/{resource_group.name}/policy/"
    lsf = {**POLICY, "policy_kind": "queue", "policy_preempt_for": "mini_job",
           "policy_no_preempt_interval_minutes": "30", "policy_preempt_jobtypes": ["exclusive"],
           "policy_max_preemptions_per_job": "3"}
    bad = op.post(url, {**lsf, "policy_no_preempt_interval_minutes": "-5", "policy_preempt_for": "mini",
                        "reason": "r", "action": "save"})
    assert bad.status_code == 200
    assert {"policy_no_preempt_interval_minutes", "policy_preempt_for"} <= set(bad.context["form"].errors)
    assert ResourceGroup.objects.get(pk=resource_group.pk).policy == {"kind": "class_cost"}
    assert op.post(url, {**lsf, "reason": "LSF queues", "action": "save"}).status_code == 302
    policy = ResourceGroup.objects.get(pk=resource_group.pk).policy
    assert (policy["kind"], policy["preempt_for"], policy["no_preempt_interval_minutes"],
            policy["preempt_jobtypes"], policy["max_preemptions_per_job"]) == ("queue", "mini_job", 30, ["exclusive"], 3)
    assert PolicyChange.objects.get().reason == "LSF queues"
