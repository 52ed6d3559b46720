"""Stopping running work, in the running system. Own work only: a member's cancel of a colleague's
running job is refused and the job goes on at its agent; the tenant's admin cancels it, and it
keeps its node until the agent ends the process. Walltime: work that has run its walltime is
stopped through its agent and fails with the reason.

One real Daphne on PostgreSQL and Redis (one for the module), the real agent program (``--simulate``) connected to it,
submissions over REST, the real pass (Celery eager: a submission's pass runs at its commit), the
agent's reports over the socket, and the history each member reads back through the API.
"""

from __future__ import annotations

import time

import pytest

from nodes.actions import agent_token_issue
from nodes.models import Node
from scheduling.actions.lifecycle import sweep
from scheduling.models import Allocation, Membership, Placement
from tests.nodes.test_end_to_end import agent_factory, daphne, wait_for  # noqa: F401
from tests.scheduling.seed_e2e import (
    client_for,
    eager_passes,  # noqa: F401  (autouse)
    nodes,
    one_control_plane,  # noqa: F401  (the module's one Daphne)
    started_ago,
    states,
    submitted,
)

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def colleagues(django_user_model, tenant_physics):
    """physics: alice (who submits), dave (a member) and erin (an admin)."""
    for name, role in (("dave", "member"), ("erin", "admin")):
        user = django_user_model.objects.create_user(name, password=f"pw-{name}-123")
        Membership.objects.create(user=user, tenant=tenant_physics, role=role)


def _running_at_its_agent(tmp_path, agent_factory, group, vc, **body) -> int:  # noqa: F811
    """Alice's job, started on a node whose simulated agent reported the start."""
    (node,) = nodes(group, vc, 1)
    agent_factory(agent_token_issue(node=node), workdir=tmp_path / node.name,
                  args=("--simulate", "--sim-seconds", "600", "--log-level", "WARNING"))
    wait_for(lambda: Node.objects.get(pk=node.pk).last_heartbeat_at, 60, "the agent's hello")
    job = submitted(client_for("alice"), per_node={"gpu": 4}, **body)
    wait_for(lambda: Allocation.objects.get(pk=job).events.filter(
        reason__contains="(simulated, no process)").exists(), 30, "the agent to start the job")
    return job


def test_a_colleague_cannot_cancel_running_work_and_an_admin_can(tmp_path, agent_factory, resource_group,  # noqa: F811
                                                                  vcluster_hpc, colleagues):
    job = _running_at_its_agent(tmp_path, agent_factory, resource_group, vcluster_hpc)
    dave, erin = client_for("dave"), client_for("erin")

    refused = dave.post(f"/api/v1/allocations/{job}/cancel/")
    assert refused.status_code == 403
    assert "a member may cancel only the work they submitted" in refused.json()["detail"]
    node = Node.objects.get(placements__allocation_id=job)
    # The agent goes on heartbeating it as running: nothing was sent to stop it.
    wait_for(lambda: Node.objects.get(pk=node.pk).last_seq > node.last_seq, 30, "a later heartbeat")
    assert [(a, b) for a, b in states(job) if a != b] == [("", "pending"), ("pending", "running")]

    cancelled = erin.post(f"/api/v1/allocations/{job}/cancel/")
    # Its process may still run: it keeps its node, and its GPUs, until its agent reports it gone.
    assert cancelled.status_code == 200 and cancelled.json()["state"] == "terminating"
    wait_for(lambda: Allocation.objects.get(pk=job).state == "cancelled", 30, "the agent to end the job")
    events = list(Allocation.objects.get(pk=job).events.order_by("id").values_list(
        "from_state", "to_state", "actor__username"))
    assert events[-2:] == [("running", "terminating", "erin"), ("terminating", "cancelled", None)]
    assert not Placement.objects.filter(allocation_id=job).exists()

    history = dave.get(f"/api/v1/allocations/{job}/events/").json()["results"]
    assert [(e["to_state"], e["actor"]) for e in history if e["from_state"] != e["to_state"]] == [
        ("pending", "alice"), ("running", None), ("terminating", "erin"), ("cancelled", None)]
    time.sleep(0.5)  # a report the agent might still send changes nothing now
    assert Allocation.objects.get(pk=job).state == "cancelled"


def test_work_past_its_walltime_is_stopped_by_its_agent_and_fails(tmp_path, agent_factory, resource_group,  # noqa: F811
                                                                  vcluster_hpc, tenant_physics):
    job = _running_at_its_agent(tmp_path, agent_factory, resource_group, vcluster_hpc, walltime_minutes=2)
    started_ago(job, 3)  # the test cannot wait two minutes
    assert sweep()["walltime"] == 1  # the periodic sweep, as the worker runs it
    wait_for(lambda: Allocation.objects.get(pk=job).state == "failed", 30, "the agent to end the job")
    assert [(a, b) for a, b in states(job) if a != b][-2:] == [("running", "terminating"), ("terminating", "failed")]
    assert not Placement.objects.filter(allocation_id=job).exists()

    alice = client_for("alice")
    history = alice.get(f"/api/v1/allocations/{job}/events/").json()["results"]
    assert history[-1]["reason"].startswith("walltime exceeded (2 min); exited: terminated")
    assert alice.get(f"/api/v1/allocations/{job}/").json()["state"] == "failed"
