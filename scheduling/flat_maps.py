"""Flat JSON mappings taken from agents and clients and kept as they are (a node's labels, a
hello's capacity, a request's label constraints), bounded so that a deep or huge document is
refused with the field named rather than stored: labels map at most ``MAX_LABELS`` names of 1 to
``MAX_LABEL_KEY`` characters to strings of at most ``MAX_LABEL_VALUE``; a capacity maps at most
``MAX_RESOURCES`` resource names to numbers from 0 to ``MAX_AMOUNT``. No Lattice imports, and
nothing of Django outside ``validate_labels``: the agent protocol's parser uses it, and the agent
imports nothing of Django."""

from __future__ import annotations

import math

MAX_LABELS = 64
MAX_LABEL_KEY = 128
MAX_LABEL_VALUE = 128
MAX_RESOURCES = 16
MAX_RESOURCE_NAME = 64
MAX_AMOUNT = 2**31 - 1


def labels_problem(value: object) -> str | None:
    """Why ``value`` is not a bounded flat mapping of names to strings, or None."""
    if not isinstance(value, dict):
        return "must be an object of names to strings"
    if len(value) > MAX_LABELS:
        return f"at most {MAX_LABELS} labels"
    for key, text in value.items():
        if not isinstance(key, str) or not 0 < len(key) <= MAX_LABEL_KEY:
            return f"label names must be 1 to {MAX_LABEL_KEY} characters"
        if not isinstance(text, str):
            return f"label {key!r} must be a string (labels are flat: no objects, lists or numbers)"
        if len(text) > MAX_LABEL_VALUE:
            return f"label {key!r} must be at most {MAX_LABEL_VALUE} characters"
    return None


def capacity_problem(value: object) -> str | None:
    """Why ``value`` is not a bounded flat mapping of resource names to numbers, or None."""
    if not isinstance(value, dict):
        return "must be an object of resource names to numbers"
    if len(value) > MAX_RESOURCES:
        return f"at most {MAX_RESOURCES} resources"
    for key, amount in value.items():
        if not isinstance(key, str) or not 0 < len(key) <= MAX_RESOURCE_NAME:
            return f"resource names must be 1 to {MAX_RESOURCE_NAME} characters"
        if isinstance(amount, bool) or not isinstance(amount, (int, float)) or not math.isfinite(amount) \
                or not 0 <= amount <= MAX_AMOUNT:
            return f"resource {key!r} must be a number from 0 to {MAX_AMOUNT}"
    return None


def validate_labels(value: object) -> None:
    """``labels_problem`` as a model or serializer field's validator."""
    from django.core.exceptions import ValidationError  # (the server's side only)

    problem = labels_problem(value)
    if problem is not None:
        raise ValidationError(problem, code="invalid")
