"""The console's node page: drain, undrain and a new agent token, each with a reason and audited;
the token shown once and never cached; tenants refused."""

from __future__ import annotations

import pytest
from django.utils import timezone

from nodes.actions import agent_token_issue
from nodes.models import Node
from scheduling.models import PolicyChange
from tests.nodes.conftest import authenticated

pytestmark = pytest.mark.django_db


@pytest.fixture
def ops(client, operator):
    client.force_login(operator)
    return client


def test_drain_and_undrain_with_a_reason_each_audited(ops, node_gpu_a):
    url = "/ops/nodes/gpu-a/"
    assert "Drain</button>" in ops.get(url).content.decode()
    done = ops.post(url, {"action": "drain", "reason": "disk replacement", "confirmed": "1"})
    assert done.status_code == 302 and Node.objects.get(pk=node_gpu_a.pk).state == "draining"
    page = ops.get(url).content.decode()
    assert "Undrain</button>" in page and "disk replacement" in page
    Node.objects.filter(pk=node_gpu_a.pk).update(last_heartbeat_at=timezone.now())  # its agent is there
    ops.post(url, {"action": "undrain", "reason": "disk replaced"})
    assert Node.objects.get(pk=node_gpu_a.pk).state == "ready"
    assert list(PolicyChange.objects.order_by("id").values_list("action", "reason", "before", "after")) == [
        ("drain", "disk replacement", {"state": "ready"}, {"state": "draining"}),
        ("undrain", "disk replaced", {"state": "draining"}, {"state": "ready"})]


def test_a_change_without_a_reason_is_refused_and_changes_nothing(ops, node_gpu_a):
    refused = ops.post("/ops/nodes/gpu-a/", {"action": "drain", "reason": ""})
    assert refused.status_code == 400 and "reason" in refused.content.decode()
    refused = ops.post("/ops/nodes/gpu-a/", {"action": "reboot", "reason": "because"})
    assert refused.status_code == 400
    assert Node.objects.get(pk=node_gpu_a.pk).state == "ready" and not PolicyChange.objects.exists()


def test_a_new_agent_token_is_shown_once_works_and_revokes_the_old_one(ops, node_gpu_a):
    old = agent_token_issue(node=node_gpu_a)
    response = ops.post("/ops/nodes/gpu-a/", {"action": "agent_token", "reason": "new disk image"})
    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"]
    page = response.content.decode()
    token = page.split('<pre id="agent-token">')[1].split("</pre>")[0]
    assert authenticated(token) == node_gpu_a and authenticated(old) is None
    assert token not in ops.get("/ops/nodes/gpu-a/").content.decode()  # shown once
    entry = PolicyChange.objects.get()
    assert (entry.action, entry.reason, entry.before, entry.after) == (
        "agent_token", "new disk image", {"active_tokens": 1}, {"active_tokens": 1})
    assert token not in str(entry.before) + str(entry.after)


def test_the_node_page_shows_what_runs_there_and_links_from_the_map(ops, node_gpu_a, make_allocation,
                                                                    vcluster_hpc, resource_group):
    from scheduling.passes.run import schedule_pass

    alloc = make_allocation(state="pending", node_count=1, per_node_gpu=8, vcluster=vcluster_hpc)
    schedule_pass(resource_group.pk)
    page = ops.get("/ops/nodes/gpu-a/").content.decode()
    assert f'<a href="/jobs/{alloc.pk}/">#{alloc.pk}</a>' in page and "physics" in page
    assert '<a href="/ops/nodes/gpu-a/">gpu-a</a>' in ops.get(f"/ops/groups/{resource_group.name}/").content.decode()


def test_tenants_cannot_open_it(client, tenant_physics, node_gpu_a):
    client.force_login(tenant_physics.memberships.first().user)
    assert client.get("/ops/nodes/gpu-a/").status_code == 403
    assert client.post("/ops/nodes/gpu-a/", {"action": "drain", "reason": "x"}).status_code == 403
    assert Node.objects.get(pk=node_gpu_a.pk).state == "ready"
