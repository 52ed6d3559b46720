"""Issuing API tokens (agent tokens: nodes.actions). Shown once, stored hashed."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser

from scheduling.models import ApiToken


def api_token_issue(*, user: AbstractBaseUser) -> str:
    """Create an API token for ``user`` and return it (the only time it is visible)."""
    return ApiToken.issue(user=user)
