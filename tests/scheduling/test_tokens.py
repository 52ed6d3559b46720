"""A user's own API tokens: issued once, listed without secrets, revoked for good; nobody else's."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from scheduling.actions.tokens import api_token_issue
from scheduling.models import ApiToken

pytestmark = pytest.mark.django_db


def _get(client, path, token):
    return client.get(path, HTTP_AUTHORIZATION=f"Token {token}")


def _post(client, path, token):
    return client.post(path, HTTP_AUTHORIZATION=f"Token {token}")


def test_issue_list_and_revoke_own_tokens(client, tenant_physics, django_user_model):
    alice = django_user_model.objects.get(username="alice")
    first = api_token_issue(user=alice)
    issued = _post(client, "/api/v1/tokens/", first)
    assert issued.status_code == 201
    second = issued.json()["token"]
    stored = ApiToken.objects.get(pk=issued.json()["id"])
    assert stored.user == alice and second.startswith(stored.prefix) and second not in stored.digest
    assert _get(client, "/api/v1/allocations/", second).status_code == 200

    listed = _get(client, "/api/v1/tokens/", second).json()["results"]
    assert {row["id"] for row in listed} == set(ApiToken.objects.filter(user=alice).values_list("pk", flat=True))
    assert all(set(row) == {"id", "prefix", "created_at", "revoked_at"} for row in listed)

    revoked = _post(client, f"/api/v1/tokens/{stored.pk}/revoke/", first)
    assert revoked.status_code == 200 and revoked.json()["revoked_at"] is not None
    assert _get(client, "/api/v1/allocations/", second).status_code == 401
    assert _get(client, "/api/v1/allocations/", first).status_code == 200  # the other one still works
    again = _post(client, f"/api/v1/tokens/{stored.pk}/revoke/", first)
    assert again.json()["revoked_at"] == revoked.json()["revoked_at"]


def test_issuing_takes_no_fields_and_refuses_one_by_name(client, tenant_physics, django_user_model):
    alice = django_user_model.objects.get(username="alice")
    first = api_token_issue(user=alice)
    auth = {"HTTP_AUTHORIZATION": f"Token {first}"}
    named = client.post("/api/v1/tokens/", {"name": "ci"}, content_type="application/json", **auth)
    assert named.status_code == 400 and named.json() == {"name": ["unknown field"]}
    listed = client.post("/api/v1/tokens/", [1], content_type="application/json", **auth)
    assert listed.status_code == 400 and listed.json() == ["takes no body"]
    assert ApiToken.objects.filter(user=alice).count() == 1
    assert client.post("/api/v1/tokens/", {}, content_type="application/json", **auth).status_code == 201


def test_another_users_tokens_are_invisible_and_cannot_be_revoked(client, tenant_physics, tenant_chemistry,
                                                                django_user_model):
    alice = django_user_model.objects.get(username="alice")
    bob = django_user_model.objects.get(username="bob")
    alices = api_token_issue(user=alice)
    bobs = api_token_issue(user=bob)
    bob_record = ApiToken.objects.get(user=bob)
    assert [row["id"] for row in _get(client, "/api/v1/tokens/", alices).json()["results"]] == \
        [ApiToken.objects.get(user=alice).pk]
    assert _post(client, f"/api/v1/tokens/{bob_record.pk}/revoke/", alices).status_code == 404
    bob_record.refresh_from_db()
    assert bob_record.revoked_at is None
    assert _get(client, "/api/v1/allocations/", bobs).status_code == 200
    assert client.get("/api/v1/tokens/").status_code in (401, 403)  # anonymous


def test_command_revokes_all_or_one_by_prefix(tenant_physics, django_user_model, client):
    alice = django_user_model.objects.get(username="alice")
    one, two, three = (api_token_issue(user=alice) for _ in range(3))
    out = io.StringIO()
    call_command("api_token", "alice", "--revoke", one[:12], stdout=out)
    assert "revoked 1 token" in out.getvalue()
    assert _get(client, "/api/v1/allocations/", one).status_code == 401
    assert _get(client, "/api/v1/allocations/", two).status_code == 200
    with pytest.raises(CommandError) as error:
        call_command("api_token", "alice", "--revoke", one[:12], stdout=io.StringIO())
    assert error.value.returncode == 2
    call_command("api_token", "alice", "--revoke", stdout=out)
    assert "revoked 2 token" in out.getvalue()
    assert _get(client, "/api/v1/allocations/", three).status_code == 401
