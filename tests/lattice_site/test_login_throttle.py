"""Logins are throttled (django-axes): after a few failures for one username from one address, that
pair is locked out for a cool-off; other addresses, and API tokens, are unaffected."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.conf import settings
from django.test import Client

pytestmark = pytest.mark.django_db


def _login(password: str, ip: str = "10.0.0.1") -> tuple[int, bool]:
    browser = Client(REMOTE_ADDR=ip)
    response = browser.post("/accounts/login/", {"username": "alice", "password": password})
    return response.status_code, "_auth_user_id" in browser.session


def test_a_username_and_address_are_locked_out_after_repeated_failures(tenant_physics):
    from scheduling.actions.tokens import api_token_issue
    from scheduling.models import Membership

    assert _login("pw-alice-123") == (302, True)
    for _ in range(settings.AXES_FAILURE_LIMIT):
        assert _login("wrong")[1] is False
    assert _login("pw-alice-123") == (429, False)  # even the right password, for the cool-off
    assert _login("pw-alice-123", ip="10.0.0.2") == (302, True)  # another address is not locked

    token = api_token_issue(user=Membership.objects.get(tenant=tenant_physics).user)
    assert Client().get("/api/v1/allocations/", HTTP_AUTHORIZATION=f"Token {token}").status_code == 200


def test_the_lockout_ends_after_the_cool_off(tenant_physics):
    from axes.models import AccessAttempt

    for _ in range(settings.AXES_FAILURE_LIMIT):
        _login("wrong")
    assert _login("pw-alice-123") == (429, False)
    AccessAttempt.objects.update(attempt_time=AccessAttempt.objects.get().attempt_time
                                 - settings.AXES_COOLOFF_TIME - timedelta(seconds=1))
    assert _login("pw-alice-123") == (302, True)


def test_authenticating_outside_a_request_still_works(tenant_physics):
    from django.contrib.auth import authenticate

    assert authenticate(username="alice", password="pw-alice-123") is not None
