"""GET /api/v1/resource-groups/{name}/queue/: positions as the pass orders the queue, for operators
and for tenants (who see only their own work), against an order computed here from the rules of a
priority group (a class_cost group's order is the score's: test_queue_order.py runs the pass)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from nodes.models import Node
from scheduling.models import Allocation, Placement

pytestmark = pytest.mark.django_db

# (tenant, class, priority, minutes ago): a mix where every part of the key decides somewhere.
JOBS = [("physics", 3, 10, 5), ("chemistry", 3, 10, 9), ("physics", 5, 10, 1), ("chemistry", 3, 50, 2),
        ("physics", 1, 90, 30), ("chemistry", 5, 10, 1), ("physics", 3, 50, 2), ("chemistry", 0, 0, 60)]


@pytest.fixture
def queue(resource_group, vcluster_hpc, node_gpu_a, tenant_physics, tenant_chemistry):
    resource_group.policy = {"kind": "priority"}
    resource_group.save()
    now = timezone.now()
    tenants = {"physics": tenant_physics, "chemistry": tenant_chemistry}
    made = []
    for tenant, klass, priority, ago in JOBS:
        t = tenants[tenant]
        made.append(Allocation.objects.create(
            resource_group=resource_group, tenant=t, user=t.memberships.first().user, vcluster=vcluster_hpc,
            state="pending", node_count=1, per_node_gpu=8, preemption_class=klass, priority=priority,
            submitted_at=now - timedelta(minutes=ago)))
    # The last one (priority 0) is a preemptor already holding a node: it goes first whatever its key.
    Placement.objects.create(allocation=made[-1], node=Node.objects.get(name="gpu-a"), kind="held")
    return made


def _expected(allocs):
    """docs/decisions.md: holders first, then higher priority, earlier, lower id."""
    held = set(Placement.objects.filter(kind="held").values_list("allocation_id", flat=True))
    return sorted(allocs, key=lambda a: (a.pk not in held, -a.priority, a.submitted_at, a.pk))


def test_operators_read_every_position_in_the_passs_order(api_for, operator, queue):
    body = api_for("op").get("/api/v1/resource-groups/rg-main/queue/").json()
    expected = _expected(queue)
    assert [r["id"] for r in body["results"]] == [a.pk for a in expected]
    assert [r["position"] for r in body["results"]] == list(range(1, len(queue) + 1))
    assert body["kind"] == "priority" and body["count"] == body["queued"] == len(queue)
    first = body["results"][0]
    assert first["order"][0] == {"term": "holds_nodes", "value": True} and first["tenant"] == "chemistry"
    assert [t["term"] for t in first["order"]] == ["holds_nodes", "priority", "submitted_at"]
    # Paged by position.
    page = api_for("op").get("/api/v1/resource-groups/rg-main/queue/?offset=3&limit=2").json()
    assert [r["position"] for r in page["results"]] == [4, 5] and "offset=5" in page["next"]


def test_a_tenant_sees_its_own_positions_and_only_counts_the_rest(api_for, queue):
    expected = _expected(queue)
    body = api_for("bob").get("/api/v1/resource-groups/rg-main/queue/").json()
    theirs = [(i + 1, a) for i, a in enumerate(expected) if a.tenant.name == "chemistry"]
    assert [(r["position"], r["id"]) for r in body["results"]] == [(p, a.pk) for p, a in theirs]
    assert body["count"] == len(theirs) and body["queued"] == len(queue)
    physics_ids = {a.pk for a in queue if a.tenant.name == "physics"}
    assert not physics_ids & {r["id"] for r in body["results"]}
    assert "physics" not in str(body) and "alice" not in str(body)
    assert all("tenant" not in r and "user" not in r for r in body["results"])
    # Why the ones ahead come first, counted by the part of the key that decides.
    position, job = theirs[-1]
    counted: dict[str, int] = {}
    for other in expected[: position - 1]:
        term = ("holds_nodes" if other is expected[0] else "priority" if other.priority != job.priority
                else "submitted_at" if other.submitted_at != job.submitted_at else "id")
        counted[term] = counted.get(term, 0) + 1
    assert body["results"][-1]["ahead"] == position - 1 and body["results"][-1]["ahead_by"] == counted


def test_explain_gives_the_position(api_for, queue):
    expected = _expected(queue)
    job = next(a for a in expected if a.tenant.name == "physics")
    body = api_for("alice").get(f"/api/v1/allocations/{job.pk}/explain/").json()
    assert body["queue"]["position"] == expected.index(job) + 1
    assert body["queue"]["ahead"] == expected.index(job)


def test_bad_paging_is_a_400_naming_the_field(api_for, queue):
    response = api_for("bob").get("/api/v1/resource-groups/rg-main/queue/?limit=0")
    assert response.status_code == 400 and "limit" in response.json()
    assert api_for("bob").get("/api/v1/resource-groups/nope/queue/").status_code == 404
