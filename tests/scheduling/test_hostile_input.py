"""Hostile input answers 400 (or 413) with a JSON body naming what was wrong, never a 500 or an
HTML page: NUL characters (PostgreSQL refuses them in text), unknown fields, bad filter values,
an over-limit body."""

from __future__ import annotations

import pytest

from scheduling.models import Allocation

pytestmark = pytest.mark.django_db

JOB = {"resource_group": "rg-main", "vcluster": "hpc", "nodes": 1, "per_node": {"gpu": 8},
       "preemption_class": 3, "checkpoint": "auto", "command": ["sleep", "60"]}


@pytest.fixture
def alice(api_for, tenant_physics, two_nodes):
    return api_for("alice")


@pytest.fixture
def ops(client, operator, tenant_physics, two_nodes):
    client.force_login(operator)
    return client


@pytest.mark.postgres
@pytest.mark.parametrize(("path", "over", "field"), [
    ("/api/v1/allocations/", {"resource_group": "rg\x00main"}, "resource_group"),
    ("/api/v1/allocations/what-if/", {"resource_group": "rg\x00main"}, "resource_group"),
    ("/api/v1/allocations/", {"env": {"A\x00B": "1"}}, "env"),
    ("/api/v1/allocations/", {"constraints": {"labels": {"s\x00": "x"}}}, "constraints"),
])
def test_a_nul_in_a_submission_is_a_field_error(alice, path, over, field):
    response = alice.post(path, {**JOB, **over}, content_type="application/json")
    assert response.status_code == 400, response.content
    assert field in response.json()
    assert not Allocation.objects.exists()


@pytest.mark.postgres
@pytest.mark.parametrize(("who", "url", "name"), [
    ("alice", "/api/v1/allocations/?state=run%00ning", "state"),
    ("alice", "/api/v1/allocations/?resource_group=rg%00", "resource_group"),
    ("alice", "/api/v1/preemptions/?resource_group=rg%00", "resource_group"),
    ("ops", "/api/v1/audit/?actor=op%00", "actor"),
    ("ops", "/api/v1/audit/?target=1%00", "target"),
    ("ops", "/api/v1/nodes/gpu%00a/", "path"),
    ("ops", "/api/v1/quotas/phys%00ics/", "path"),
    ("ops", "/api/v1/tenants/phys%00ics/", "path"),
    ("ops", "/api/v1/resource-groups/rg%00/", "path"),
])
def test_a_nul_in_a_lookup_is_a_400_naming_it(request, who, url, name):
    response = request.getfixturevalue(who).get(url)
    assert response.status_code == 400, response.content
    assert response["Content-Type"].startswith("application/json")
    assert name in response.json()


@pytest.mark.postgres
def test_a_nul_in_an_operator_write_is_a_field_error(ops):
    response = ops.post("/api/v1/overrides/pause/", {"resource_group": "rg\x00", "reason": "r"},
                        content_type="application/json")
    assert response.status_code == 400
    assert "resource_group" in response.json()
    response = ops.patch("/api/v1/quotas/physics/", {"max_nodes": 2, "reason": "r\x00"},
                         content_type="application/json")
    assert response.status_code == 400
    assert "reason" in response.json()


def test_an_over_limit_body_is_refused_in_json(alice, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    response = alice.post("/api/v1/allocations/", {**JOB, "name": "x" * 2000}, content_type="application/json")
    assert response.status_code == 413
    assert response["Content-Type"].startswith("application/json")
    assert "detail" in response.json()


@pytest.mark.postgres
def test_a_nul_in_a_form_post_is_a_field_error(ops):
    response = ops.post("/api/v1/overrides/pause/", {"resource_group": "rg\x00", "reason": "r"})
    assert response.status_code == 400
    assert "resource_group" in response.json()


def test_django_s_own_errors_under_the_api_are_json(alice, client):
    missing = alice.get("/api/v1/no-such-thing/")
    assert missing.status_code == 404 and missing.json() == {"detail": "Not found."}
    page = client.get("/no-such-page/")
    assert page.status_code == 404 and not page["Content-Type"].startswith("application/json")
