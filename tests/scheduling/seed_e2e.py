"""What the seed-model end-to-end tests share: tenants submitting over REST, the real pass, and
reading back what each tenant may see."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone

from nodes.models import Node
from scheduling.models import Allocation, ResourceGroup, VCluster
from tests.nodes.test_end_to_end import ControlPlane


def client_for(username: str) -> Client:
    """A separate logged-in client per user, so two tenants can act in turn."""
    c = Client()
    c.force_login(get_user_model().objects.get(username=username))
    return c


def submit(c: Client, **body: Any) -> Any:
    return c.post("/api/v1/allocations/", {"resource_group": "rg-main", "vcluster": "hpc", "checkpoint": "auto",
                                           "command": ["train"], **body}, content_type="application/json")


def submitted(c: Client, **body: Any) -> int:
    response = submit(c, **body)
    assert response.status_code == 201, response.json()
    return int(response.json()["id"])


def nodes(group: ResourceGroup, vc: VCluster, count: int) -> list[Node]:
    return [Node.objects.create(name=f"gpu-{chr(97 + i)}", resource_group=group, vcluster=vc, gpu=8, cpu=64,
                                memory=512, state="ready") for i in range(count)]


def started_ago(alloc_id: int, minutes: float) -> None:
    """Set the start of running work back in time (the test cannot wait half an hour)."""
    Allocation.objects.filter(pk=alloc_id).update(started_at=timezone.now() - timedelta(minutes=minutes))


def states(alloc_id: int) -> list[tuple[str, str]]:
    alloc = Allocation.objects.get(pk=alloc_id)
    return [(e.from_state, e.to_state) for e in alloc.events.order_by("created_at", "id")]


def explain(c: Client, alloc_id: int) -> dict[str, Any]:
    response = c.get(f"/api/v1/allocations/{alloc_id}/explain/")
    assert response.status_code == 200, response.content
    result: dict[str, Any] = response.json()
    return result


@pytest.fixture(autouse=True)
def eager_passes(settings):
    """A submission's pass runs at its commit in this process, as a worker would run it (autouse
    in the modules that import it)."""
    settings.CELERY_TASK_ALWAYS_EAGER = True


@pytest.fixture(scope="module", name="control_plane")
def one_control_plane(django_db_setup):
    """One Daphne for every test of the module that imports it (test_end_to_end's, started once):
    each test makes its own nodes and agents, and the database is emptied between tests."""
    server = ControlPlane()
    server.start()
    yield server
    server.stop()
