"""Issuing secrets: agent and API tokens are generated here, shown once, stored hashed."""

from __future__ import annotations

import hashlib
import secrets

from django.contrib.auth.models import AbstractBaseUser

from scheduling.models import ApiToken

PREFIX_LEN = 12


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_secret(kind: str) -> str:
    return f"{kind}_{secrets.token_urlsafe(32)}"


def api_token_issue(*, user: AbstractBaseUser) -> str:
    """Create an API token for ``user`` and return it (the only time it is visible)."""
    token = new_secret("lpi")
    ApiToken.objects.create(user=user, prefix=token[:PREFIX_LEN], digest=digest(token))
    return token
