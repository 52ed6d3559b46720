"""The API's parsers refuse a NUL character anywhere in one (a key or a
value, at any depth) as a field error naming the top-level field: PostgreSQL refuses NUL in
text and in JSON, so such a value, stored or looked up, was a 500. So is a lone surrogate
(JSON's ``"\\ud800"``), which is no character at all: UTF-8 cannot carry it, so neither the
database nor an error naming it could, and a key holding one was a 500 when the answer named it."""

from __future__ import annotations

import codecs
from typing import Any

from rest_framework import parsers
from rest_framework.exceptions import ParseError, ValidationError
from rest_framework.parsers import get_encoding
from rest_framework.utils import json

from lattice_site.middleware import NUL, NUL_MESSAGE
from scheduling.json_keys import unique_keys
from scheduling.texts import lone_surrogate, texts

SURROGATE_MESSAGE = "must not contain a lone surrogate (\\ud800 to \\udfff): it is no character"


def problem(value: Any) -> str | None:
    """Why a parsed value cannot be used (a NUL or a lone surrogate in a key or a text, at any
    depth), or None."""
    for text in texts(value):
        if NUL in text:
            return NUL_MESSAGE
        if lone_surrogate(text) is not None:
            return SURROGATE_MESSAGE
    return None


def _shown(name: str) -> str:
    """A field's name as an error can show it: NUL and lone surrogates escaped."""
    return name.replace(NUL, "\\0").encode("utf-8", "backslashreplace").decode("utf-8")


def refuse_unusable(data: Any) -> None:
    """Raise a field error for each top-level field with a NUL or a lone surrogate in its name or
    anywhere in its value."""
    fields = dict(data.lists()) if hasattr(data, "lists") else data
    if isinstance(fields, dict):
        bad = {_shown(k): [p] for k, v in fields.items() if (p := problem(k) or problem(v))}
        if bad:
            raise ValidationError(bad)
    elif (p := problem(fields)) is not None:
        raise ValidationError({"non_field_errors": [p]})


class JSONParser(parsers.JSONParser):
    def parse(self, stream: Any, media_type: str | None = None,
              parser_context: dict[str, Any] | None = None) -> Any:
        encoding = get_encoding(parser_context or {})
        try:
            data = json.load(codecs.getreader(encoding)(stream), parse_constant=json.strict_constant,
                             object_pairs_hook=unique_keys)
        except ValueError as exc:
            raise ParseError(f"JSON parse error - {exc}") from None
        except RecursionError:  # json's decoder recurses once per level of nesting
            raise ParseError("JSON parse error - nested too deeply to be read") from None
        refuse_unusable(data)
        return data


class FormParser(parsers.FormParser):
    def parse(self, stream: Any, media_type: str | None = None,
              parser_context: dict[str, Any] | None = None) -> Any:
        data = super().parse(stream, media_type, parser_context)
        refuse_unusable(data)
        return data


class MultiPartParser(parsers.MultiPartParser):
    def parse(self, stream: Any, media_type: str | None = None,
              parser_context: dict[str, Any] | None = None) -> Any:
        parsed = super().parse(stream, media_type, parser_context)
        refuse_unusable(parsed.data)
        return parsed
