"""Model fields with one difference from Django's own, each said why."""

from __future__ import annotations

from typing import Any

from django.db import models


class RecordJSONField(models.JSONField):
    """A JSON document per row that is written in bulk (decision records). On PostgreSQL Django
    sends a bulk insert's column as one array (``UNNEST``), and the driver writes an array of
    documents as text, escaping every quote of every document one at a time: several
    milliseconds per batch of records. A placeholder of its own makes Django send each value as
    a parameter of a plain multi-row insert instead. Same column type, same values."""

    def get_placeholder(self, value: Any, compiler: Any, connection: Any) -> str:
        return "%s"
