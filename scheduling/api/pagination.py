"""Cursor pagination for every list over history: a page costs the same however deep it is."""

from __future__ import annotations

from rest_framework.pagination import CursorPagination


class NewestFirst(CursorPagination):
    ordering = "-id"
    page_size = 50


class OldestFirst(CursorPagination):
    """History reads forward: the first page is the submission."""

    ordering = "id"
    page_size = 100


class ByName(CursorPagination):
    """Named things without a creation time (nodes): alphabetical, the name being unique."""

    ordering = "name"
    page_size = 100
