"""Work whose tenant maps no Unix user, on a node whose agent runs as root, through the running
system: submitted over the API, placed by the pass, sent to a real agent over the socket, which
refuses it (it would run as root) and says so; the history and the job page say why. Once the
operator allows root for the tenant, the same work runs."""

from __future__ import annotations

import os
import sys

import pytest

from nodes.actions import agent_token_issue
from scheduling.models import Allocation, AllocationEvent, Tenant
from scheduling.passes.run import schedule_pass
from tests.nodes.test_end_to_end import wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.django_db(transaction=True)]


def test_unmapped_work_is_refused_by_a_root_agent_until_the_tenant_may_run_as_root(
        tmp_path, api_for, resource_group, vcluster_hpc, node_gpu_a, tenant_physics, agent_factory):
    if os.geteuid() != 0:
        pytest.skip("the agent runs as root only when the test does")
    Tenant.objects.filter(pk=tenant_physics.pk).update(allow_root=False, unix_user="")
    agent_factory(agent_token_issue(node=node_gpu_a))
    wait_for(lambda: type(node_gpu_a).objects.get(pk=node_gpu_a.pk).last_heartbeat_at, 30, "the agent's hello")
    ran = tmp_path / "ran"
    alice = api_for("alice")
    body = {"resource_group": resource_group.name, "vcluster": "hpc", "per_node": {"gpu": 1},
            "command": [sys.executable, "-c", f"open({str(ran)!r}, 'a').write('ran')"]}

    refused = alice.post("/api/v1/allocations/", body, content_type="application/json").json()["id"]
    schedule_pass(resource_group.pk)
    wait_for(lambda: Allocation.objects.get(pk=refused).state == "failed", 30, "the agent's refusal")
    assert AllocationEvent.objects.filter(allocation_id=refused, reason__startswith="exited: refused").exists()
    assert not ran.exists()
    page = alice.get(f"/jobs/{refused}/").content.decode()
    assert "it would have run as root" in page and "allow root for the tenant" in page
    assert "--unmapped-as-agent" in page  # the remedy where an agent not running as root refused it

    Tenant.objects.filter(pk=tenant_physics.pk).update(allow_root=True)  # the operator's leave
    allowed = alice.post("/api/v1/allocations/", body, content_type="application/json").json()["id"]
    schedule_pass(resource_group.pk)
    wait_for(lambda: Allocation.objects.get(pk=allowed).state == "completed", 30, "the allowed job to run")
    assert ran.read_text() == "ran"
