"""Secrets shown once and stored as a SHA-256 digest; looked up by prefix, compared in constant time."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from typing import Any, TypeVar

from django.db import models

PREFIX_LEN = 12
T = TypeVar("T", bound="HashedToken")


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class HashedToken(models.Model):
    prefix = models.CharField(max_length=PREFIX_LEN, db_index=True)
    digest = models.CharField(max_length=64)
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    KIND = "tok"

    class Meta:
        abstract = True
        ordering = ["-created_at"]

    @classmethod
    def issue(cls, **owner: Any) -> str:
        """Create a token for ``owner`` and return it: the only time it is visible."""
        token = f"{cls.KIND}_{secrets.token_urlsafe(32)}"
        cls.objects.create(prefix=token[:PREFIX_LEN], digest=digest(token), **owner)  # type: ignore[attr-defined]
        return token

    @staticmethod
    def matches(stored_digest: str, token: str) -> bool:
        """Whether ``token`` is the one ``stored_digest`` was made from, in constant time."""
        return hmac.compare_digest(stored_digest, digest(token))

    @classmethod
    def lookup(cls: type[T], token: str, *related: str) -> T | None:
        """The unrevoked token record matching ``token``, or None."""
        found = None
        for candidate in cls.objects.filter(prefix=token[:PREFIX_LEN], revoked_at__isnull=True) \
                .select_related(*related).order_by():  # type: ignore[attr-defined]
            if cls.matches(candidate.digest, token):
                found = candidate
        return found
