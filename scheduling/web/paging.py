"""Pages over history, newest first, behind an id cursor (``?before=ID``): a page costs the same
however deep it is, as the API's cursor pagination."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.http import HttpRequest

from scheduling.ids import row_id

PAGE = 50


def older_page(qs: QuerySet[Any], request: HttpRequest, size: int = PAGE) -> tuple[list[Any], int | None]:
    """A page of ``qs`` (ordered newest first by id) older than the request's ``before``, and the
    cursor of the page after it (None on the last one). A ``before`` that is not an id is ignored."""
    before = row_id(request.GET.get("before", ""))
    if before is not None:
        qs = qs.filter(pk__lt=before)
    rows = list(qs[:size])
    return rows, (rows[-1].pk if len(rows) == size else None)
