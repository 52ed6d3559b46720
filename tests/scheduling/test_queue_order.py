"""The queue's positions are the order the pass really starts work in: in a class_cost group that is
the Lattice score, not the class order. Read through the API, explain, the job page and the
operator's group page before each pass, then the real pass runs on one free node and must start
the request shown first. Held work, work waiting on a dependency and an array's tasks past its
throttle are listed without a position, each with its reason."""

from __future__ import annotations

import re

import pytest

from scheduling.models import Allocation
from scheduling.passes.run import schedule_pass
from tests.scheduling.batch_helpers import exit_on, job_id, sent_fixture  # noqa: F401
from tests.scheduling.seed_e2e import client_for

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]


@pytest.fixture
def cluster(resource_group, vcluster_hpc, two_nodes, tenant_physics, tenant_chemistry, operator, sent,
            django_capture_on_commit_callbacks):
    """Physics' job runs on one node (so physics is over its fair share), the other is free."""
    alice = client_for("alice")
    running = job_id(alice, preemption_class=3)
    schedule_pass(resource_group.pk)
    assert Allocation.objects.get(pk=running).state == "running"
    return running


def _shown(pk: int) -> dict:
    """What each place says about one job: the queue API (operator), explain and the job page."""
    return client_for("alice" if Allocation.objects.get(pk=pk).tenant.name == "physics" else "bob").get(
        f"/api/v1/allocations/{pk}/explain/").json()


def test_the_pass_starts_work_in_the_positions_shown(cluster, resource_group, sent):
    alice, bob, op = client_for("alice"), client_for("bob"), client_for("op")
    physics = [job_id(alice, preemption_class=3, name=f"p{i}") for i in range(2)]
    chemistry = [job_id(bob, preemption_class=3, name=f"c{i}") for i in range(2)]
    held = job_id(alice, preemption_class=3, held=True)
    after = job_id(alice, preemption_class=3, depends_on=[{"type": "afterok", "job": cluster}])
    array = alice.post("/api/v1/allocations/", {"resource_group": "rg-main", "vcluster": "hpc", "per_node": {"gpu": 8},
                                                "command": ["t"], "array": "0-2%1", "preemption_class": 3},
                       content_type="application/json").json()
    tasks = [t["id"] for t in array["tasks"]]

    first = op.get("/api/v1/resource-groups/rg-main/queue/").json()
    # Fair share: chemistry, below its share, comes before physics' earlier submissions.
    positioned = [r["id"] for r in first["results"] if r["position"] is not None]
    assert positioned.index(chemistry[0]) < positioned.index(physics[0])
    assert [t["term"] for t in first["results"][0]["order"]] == ["holds_nodes", "score", "class", "priority",
                                                                 "submitted_at"]
    # sprio's breakdown: each request's score in its weighted terms, and the queue in score order.
    scores = [r["score"] for r in first["results"] if r["position"] is not None]
    assert scores == sorted(scores, reverse=True)
    for r in first["results"][: len(scores)]:
        detail = r["score_detail"]
        assert len(detail["terms"]) == 9
        assert sum(t["value"] * t["weight"] for t in detail["terms"]) * detail["penalty"] == pytest.approx(
            r["score"], abs=1e-5)
    aside = {r["id"]: r for r in first["results"] if r["position"] is None}
    assert set(aside) == {held, after, tasks[1], tasks[2]}
    codes = {pk: r["reason"]["code"] for pk, r in aside.items()}
    assert codes == {held: "HELD", after: "DEPENDENCY", tasks[1]: "ARRAY_THROTTLE", tasks[2]: "ARRAY_THROTTLE"}
    assert "at most 1 of its tasks" in aside[tasks[1]]["reason"]["explanation"]
    assert _shown(tasks[2])["reason"]["code"] == "ARRAY_THROTTLE" and _shown(tasks[2])["queue"]["position"] is None

    started: list[int] = []
    for _ in range(7):
        body = op.get("/api/v1/resource-groups/rg-main/queue/").json()
        order = [r["id"] for r in body["results"] if r["position"] is not None]
        if not order:
            break
        for position, pk in enumerate(order, start=1):  # every place agrees
            assert _shown(pk)["queue"]["position"] == position
        page = (alice if order[0] in physics + tasks else bob).get(f"/jobs/{order[0]}/").content.decode()
        assert f"Position <b>1</b> of {len(order)}" in page
        assert "Ordered by holding nodes no, score " in page and "holds_nodes" not in page  # in words
        ops = op.get("/ops/groups/rg-main/").content.decode()
        assert [int(x) for x in re.findall(r'<tr data-id="(\d+)"><td class="pos">\d+', ops)] == order
        schedule_pass(resource_group.pk)
        now_running = [pk for pk in order if Allocation.objects.get(pk=pk).state == "running"]
        assert now_running == [order[0]], (order, now_running)
        started.append(order[0])
        exit_on(order[0], code=0, reason="completed")
    assert sorted(started) == sorted([*physics, *chemistry, *tasks])
    assert Allocation.objects.get(pk=held).state == Allocation.objects.get(pk=after).state == "pending"


def test_a_tenant_sees_its_set_aside_work_and_never_anothers(cluster, resource_group):
    alice, bob = client_for("alice"), client_for("bob")
    mine = job_id(bob, preemption_class=3, held=True)
    theirs = job_id(alice, preemption_class=3, held=True)
    queued = job_id(alice, preemption_class=3)
    body = bob.get("/api/v1/resource-groups/rg-main/queue/").json()
    assert [(r["id"], r["position"]) for r in body["results"]] == [(mine, None)]
    assert body["results"][0]["reason"]["code"] == "HELD"
    assert body["queued"] == 1 and body["count"] == 1
    assert {theirs, queued}.isdisjoint(r["id"] for r in body["results"]) and "physics" not in str(body)
    page = bob.get(f"/jobs/{mine}/").content.decode()
    assert "Not in the queue of rg-main yet" in page
