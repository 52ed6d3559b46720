"""The API's parsers refuse a NUL character anywhere in one (a key or a
value, at any depth) as a field error naming the top-level field: PostgreSQL refuses NUL in
text and in JSON, so such a value, stored or looked up, was a 500."""

from __future__ import annotations

from typing import Any

from rest_framework import parsers
from rest_framework.exceptions import ValidationError

from lattice_site.middleware import NUL, NUL_MESSAGE


def has_nul(value: Any) -> bool:
    if isinstance(value, str):
        return NUL in value
    if isinstance(value, dict):
        return any(has_nul(k) or has_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(has_nul(v) for v in value)
    return False


def refuse_nul(data: Any) -> None:
    """Raise a field error for each top-level field with a NUL in its name or anywhere in its value."""
    fields = dict(data.lists()) if hasattr(data, "lists") else data
    if isinstance(fields, dict):
        bad = {k.replace(NUL, "\\0"): [NUL_MESSAGE] for k, v in fields.items() if has_nul(k) or has_nul(v)}
        if bad:
            raise ValidationError(bad)
    elif has_nul(fields):
        raise ValidationError({"non_field_errors": [NUL_MESSAGE]})


class JSONParser(parsers.JSONParser):
    def parse(self, stream: Any, media_type: str | None = None,
              parser_context: dict[str, Any] | None = None) -> Any:
        data = super().parse(stream, media_type, parser_context)
        refuse_nul(data)
        return data


class FormParser(parsers.FormParser):
    def parse(self, stream: Any, media_type: str | None = None,
              parser_context: dict[str, Any] | None = None) -> Any:
        data = super().parse(stream, media_type, parser_context)
        refuse_nul(data)
        return data


class MultiPartParser(parsers.MultiPartParser):
    def parse(self, stream: Any, media_type: str | None = None,
              parser_context: dict[str, Any] | None = None) -> Any:
        parsed = super().parse(stream, media_type, parser_context)
        refuse_nul(parsed.data)
        return parsed
