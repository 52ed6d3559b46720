"""The reason a page's form gives for a change (kept in the audit log and a job's history), read
from the POST as the API's ``ReasonInput`` reads it: no NUL (PostgreSQL refuses it in text), at
most ``MAX_REASON`` characters."""

from __future__ import annotations

from django.http import HttpRequest

MAX_REASON = 2000


def posted_reason(request: HttpRequest) -> tuple[str, str | None]:
    """The POST's ``reason``, stripped, and what is wrong with it (None when nothing is)."""
    reason = request.POST.get("reason", "").strip()
    if "\x00" in reason:
        return reason, "a reason cannot contain NUL characters"
    if len(reason) > MAX_REASON:
        return reason, f"a reason is at most {MAX_REASON} characters"
    return reason, None
