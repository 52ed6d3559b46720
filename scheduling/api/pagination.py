"""Cursor pagination for every list over history: a page costs the same however deep it is."""

from __future__ import annotations

from typing import Any

from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.pagination import Cursor as DecodedCursor
from rest_framework.pagination import CursorPagination

from lattice_site.middleware import NUL
from scheduling.ids import row_id


class Cursor(CursorPagination):
    """A ``?cursor=`` that is not one of ours is bad input: a 400 naming the parameter (DRF answers
    404 "Invalid cursor", as if the list were missing)."""

    numeric = True  # the ordering is by id: a position is a row id

    def decode_cursor(self, request: Any) -> DecodedCursor | None:
        try:
            cursor = super().decode_cursor(request)
        except NotFound:
            cursor = None
        else:
            position = cursor.position if cursor is not None else None
            if position is None or (row_id(position) is not None if self.numeric else NUL not in position):
                return cursor
        raise ValidationError({self.cursor_query_param: [
            "not a cursor this list gave: follow the next and previous links as they are"]})


class NewestFirst(Cursor):
    ordering = "-id"
    page_size = 50

    def id_bound(self, request: Any) -> tuple[str, int] | None:
        """The bound this page's cursor puts on ``id`` as a lookup and a value (``("lte", 812)``:
        ids up to 812), None on the first page. A list that reaches its rows through a join can
        put the same bound on the joined column, which the database does not infer from the
        join: a tenant's decisions 1,000 pages deep are then a range of the (tenant, decision)
        index, not a walk past every newer row. The pagination's own, stricter filter still
        decides the page."""
        cursor = self.decode_cursor(request)
        if cursor is None or cursor.position is None:
            return None
        return ("gte" if cursor.reverse else "lte", int(cursor.position))


class OldestFirst(Cursor):
    """History reads forward: the first page is the submission."""

    ordering = "id"
    page_size = 100


class ByName(Cursor):
    """Named things without a creation time (nodes): alphabetical, the name being unique."""

    ordering = "name"
    page_size = 100
    numeric = False
