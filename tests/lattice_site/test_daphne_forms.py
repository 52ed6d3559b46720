"""Form bodies under the real Daphne are read by Django alone (lattice_site/server_tuning.py).
Twisted used to read every POST form first, for nothing: a multipart body it could not read was
answered there with a bare 400 and no body, never reaching the API's JSON errors."""

from __future__ import annotations

import http.client
import json

import pytest

from scheduling.actions.tokens import api_token_issue
from scheduling.models import Allocation
from tests.nodes.test_end_to_end import control_plane, daphne  # noqa: F401  (a real Daphne)

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.django_db(transaction=True)]


def _post(port: int, path: str, body: bytes, content_type: str, token: str) -> tuple[int, str, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("POST", path, body=body, headers={"Content-Type": content_type, "Host": "127.0.0.1",
                                                       "Authorization": f"Token {token}"})
        response = conn.getresponse()
        return response.status, response.getheader("Content-Type") or "", response.read()
    finally:
        conn.close()


def test_a_multipart_body_that_is_not_one_gets_the_api_s_json_error_and_stores_nothing(
        daphne, tenant_physics, resource_group, vcluster_hpc):  # noqa: F811
    token = api_token_issue(user=tenant_physics.memberships.first().user)
    status, content_type, body = _post(daphne, "/api/v1/allocations/", b"not a multipart body at all",
                                       "multipart/form-data; boundary=x", token)
    assert status == 400
    assert content_type.startswith("application/json")
    assert json.loads(body)  # the API's own answer, saying what was wrong
    assert not Allocation.objects.exists()


def test_a_form_body_still_reaches_the_view_under_daphne(daphne, tenant_physics, make_allocation):  # noqa: F811
    user = tenant_physics.memberships.first().user
    alloc = make_allocation(state="pending", user=user)
    token = api_token_issue(user=user)
    status, _, body = _post(daphne, f"/api/v1/allocations/{alloc.pk}/hold/", b"reason=waiting+for+data",
                            "application/x-www-form-urlencoded", token)
    assert status == 200, body
    alloc.refresh_from_db()
    assert alloc.held
    assert alloc.events.filter(reason__contains="waiting for data").exists()
