"""Pages over history, newest first, behind an id cursor (``?before=ID``): a page costs the same
however deep it is, as the API's cursor pagination."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.http import HttpRequest

PAGE = 50
MAX_ID = 2**63 - 1  # the largest id the database stores


def id_param(text: str) -> int | None:
    """A query parameter as an id, or None when it is not one: ASCII digits only ("²" and "١"
    pass ``str.isdigit()`` and not ``int()``, or name another number) and within the database's range."""
    if not (text.isascii() and text.isdigit()):
        return None
    value = int(text)
    return value if 0 < value <= MAX_ID else None


def older_page(qs: QuerySet[Any], request: HttpRequest, size: int = PAGE) -> tuple[list[Any], int | None]:
    """A page of ``qs`` (ordered newest first by id) older than the request's ``before``, and the
    cursor of the page after it (None on the last one). A ``before`` that is not an id is ignored."""
    before = id_param(request.GET.get("before", ""))
    if before is not None:
        qs = qs.filter(pk__lt=before)
    rows = list(qs[:size])
    return rows, (rows[-1].pk if len(rows) == size else None)
