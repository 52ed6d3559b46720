"""Cursor pagination for every list over history: a page costs the same however deep it is."""

from __future__ import annotations

from typing import Any

from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.pagination import Cursor as DecodedCursor
from rest_framework.pagination import CursorPagination


class Cursor(CursorPagination):
    """A ``?cursor=`` that is not one of ours is bad input: a 400 naming the parameter (DRF answers
    404 "Invalid cursor", as if the list were missing)."""

    def decode_cursor(self, request: Any) -> DecodedCursor | None:
        try:
            return super().decode_cursor(request)
        except NotFound:
            raise ValidationError({self.cursor_query_param: [
                "not a cursor this list gave: follow the next and previous links as they are"]}) from None


class NewestFirst(Cursor):
    ordering = "-id"
    page_size = 50


class OldestFirst(Cursor):
    """History reads forward: the first page is the submission."""

    ordering = "id"
    page_size = 100


class ByName(Cursor):
    """Named things without a creation time (nodes): alphabetical, the name being unique."""

    ordering = "name"
    page_size = 100
