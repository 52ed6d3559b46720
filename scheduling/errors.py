"""Domain errors: one exception type, mapped to HTTP by one handler."""

from __future__ import annotations

from typing import Any


class DomainError(Exception):
    status = 400
    code = "invalid"

    def __init__(self, message: str, **detail: Any) -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail


class InvalidTransition(DomainError):
    status = 409
    code = "invalid_transition"


class Conflict(DomainError):
    status = 409
    code = "conflict"


class QuotaExceeded(DomainError):
    status = 409
    code = "quota_exceeded"
