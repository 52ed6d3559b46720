"""Issuing and revoking API tokens (agent tokens: nodes.actions). Shown once, stored hashed."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser
from django.utils import timezone

from scheduling.models import ApiToken


def api_token_issue(*, user: AbstractBaseUser) -> str:
    """Create an API token for ``user`` and return it (the only time it is visible)."""
    return ApiToken.issue(user=user)


def api_token_revoke(*, user: AbstractBaseUser, prefix: str | None = None, token_id: int | None = None) -> int:
    """Revoke ``user``'s unrevoked tokens (only those with ``prefix`` or the one ``token_id``, when
    given); returns how many. Takes effect on the next request: every request looks its token up."""
    tokens = ApiToken.objects.filter(user=user, revoked_at__isnull=True)
    if prefix is not None:
        tokens = tokens.filter(prefix=prefix)
    if token_id is not None:
        tokens = tokens.filter(pk=token_id)
    return tokens.update(revoked_at=timezone.now())
