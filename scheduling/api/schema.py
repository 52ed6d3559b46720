"""The OpenAPI schema documents every answer the API gives, errors included, so a client (and the
schema-driven test) can rely on it: 401/403 everywhere (tenants get 403 on operators' endpoints),
404 where a path names a row or a list walks pages by cursor, 400 where input is read (a body, a
filter), 409 where a write can conflict with the current state, 413 for an over-limit body.
Every error body is a JSON object: ``{"detail": ...}`` or field errors, keyed by field."""

from __future__ import annotations

from typing import Any

from drf_spectacular.openapi import AutoSchema

ERROR = {"type": "object", "additionalProperties": {},
         "description": "{\"detail\": text} (with \"error\", a code, for domain errors), or field errors: "
                        "{field: [message, ...]} (nested fields as objects)"}
TEXT = {"400": "Invalid input: field errors name each field (a filter, a body field, or 'path').",
        "401": "No credentials, or an invalid or revoked token.",
        "403": "Not allowed (operators' endpoints refuse tenants).",
        "404": "No such row visible to the caller (another tenant's is a 404 too), or an invalid cursor.",
        "409": "Conflicts with the current state (a quota, a transition that is not possible now).",
        "413": "The request body is larger than the server accepts."}
WRITES = ("POST", "PUT", "PATCH")


class LatticeSchema(AutoSchema):
    def _get_response_bodies(self, direction: Any = "response") -> dict[str, Any]:
        responses: dict[str, Any] = super()._get_response_bodies(direction)
        if direction != "response":
            return responses
        for code in self._error_codes():
            responses.setdefault(code, {"content": {"application/json": {"schema": ERROR}},
                                        "description": TEXT[code]})
        return responses

    def _error_codes(self) -> list[str]:
        codes = ["401", "403"]
        lists = self.method == "GET" and self._is_list_view() and self._get_paginator() is not None
        if "{" in self.path or lists:
            codes.append("404")
        if self.method in WRITES or lists or self.get_filter_backends() or getattr(self.view, "reads_query", False):
            codes.append("400")
        if self.method in WRITES:
            codes += ["409", "413"]
        return codes


def require_reason(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """An audited create or edit needs its ``reason`` (the serializers leave it to the view, and a
    PATCH's other fields are all optional)."""
    for name, component in result.get("components", {}).get("schemas", {}).items():
        if "reason" in component.get("properties", {}) and (name.startswith("Patched")
                                                            or name.endswith("OutputRequest")):
            component["required"] = sorted({*component.get("required", []), "reason"})
    return result
