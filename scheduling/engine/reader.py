"""Reading JSON objects field by field, collecting every error with its path."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any


class InvalidDocument(ValueError):
    """The document breaks the contract; ``errors`` lists (path, message) pairs."""

    def __init__(self, errors: list[tuple[str, str]]) -> None:
        self.errors = errors
        super().__init__("; ".join(f"{p}: {m}" for p, m in errors))


class _Errors:
    def __init__(self) -> None:
        self.items: list[tuple[str, str]] = []

    def add(self, path: str, message: str) -> None:
        self.items.append((path, message))


_MISSING = object()


def parse_time(value: Any) -> float:
    """ISO-8601 to epoch seconds; no offset means UTC."""
    if not isinstance(value, str):
        raise ValueError("must be an ISO-8601 time string")
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError("must be an ISO-8601 time") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


class _Reader:
    """Reads one JSON object, recording errors instead of raising."""

    def __init__(self, errors: _Errors, path: str, obj: Any, allowed: set[str]) -> None:
        self.errors = errors
        self.path = path
        self.ok = isinstance(obj, dict)
        self.obj: dict[str, Any] = obj if isinstance(obj, dict) else {}
        if not self.ok:
            errors.add(path or "$", "must be an object")
            return
        for key in sorted(self.obj):
            if key not in allowed:
                errors.add(self._p(key), "unknown field")

    def _p(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def has(self, key: str) -> bool:
        return key in self.obj

    def raw(self, key: str) -> Any:
        return self.obj.get(key, _MISSING)

    def _get(self, key: str, default: Any, required: bool) -> Any:
        value = self.obj.get(key, _MISSING)
        if value is _MISSING:
            if required and self.ok:
                self.errors.add(self._p(key), "is required")
            return _MISSING
        return value

    def _value(self, key: str, default: Any, *, required: bool = False,
               nullable: bool = True) -> tuple[bool, Any]:
        """(True, value) to go on checking ``value``; (False, result) when missing or null decides it."""
        value = self._get(key, default, required)
        if value is _MISSING:
            return False, default
        if value is None:
            if not nullable:
                self.errors.add(self._p(key), "may not be null")
                return False, default
            return False, None
        return True, value

    def string(self, key: str, default: Any = None, *, required: bool = False,
               nullable: bool = True, choices: tuple[str, ...] | None = None) -> Any:
        go, value = self._value(key, default, required=required, nullable=nullable)
        if not go:
            return value
        if not isinstance(value, str):
            self.errors.add(self._p(key), "must be a string")
            return default
        if choices is not None and value not in choices:
            self.errors.add(self._p(key), f"must be one of {', '.join(choices)}")
            return default
        return value

    def boolean(self, key: str, default: bool) -> bool:
        value = self._get(key, default, False)
        if value is _MISSING:
            return default
        if not isinstance(value, bool):
            self.errors.add(self._p(key), "must be true or false")
            return default
        return value

    def integer(self, key: str, default: Any, *, lo: int | None = None, hi: int | None = None,
                nullable: bool = False, required: bool = False) -> Any:
        go, value = self._value(key, default, required=required, nullable=nullable)
        if not go:
            return value
        if isinstance(value, bool) or not isinstance(value, int):
            self.errors.add(self._p(key), "must be an integer")
            return default
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            self.errors.add(self._p(key), _range_message(lo, hi))
            return default
        if abs(value) > NUMBER_LIMIT:
            self.errors.add(self._p(key), _beyond_limit())
            return default
        return value

    def number(self, key: str, default: Any, *, lo: float | None = 0.0, hi: float | None = None,
               strict_lo: bool = False, nullable: bool = False) -> Any:
        go, value = self._value(key, default, nullable=nullable)
        if not go:
            return value
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            self.errors.add(self._p(key), "must be a number")
            return default
        if lo is not None and (value <= lo if strict_lo else value < lo):
            self.errors.add(self._p(key), f"must be {'>' if strict_lo else '>='} {_fmt(lo)}")
            return default
        if hi is not None and value > hi:
            self.errors.add(self._p(key), f"must be <= {_fmt(hi)}")
            return default
        if abs(value) > NUMBER_LIMIT:
            self.errors.add(self._p(key), _beyond_limit())
            return default
        return float(value)

    def time(self, key: str, *, required: bool = False) -> float | None:
        value = self._get(key, None, required)
        if value is _MISSING or value is None:
            if value is None and required:
                self.errors.add(self._p(key), "may not be null")
            return None
        try:
            return parse_time(value)
        except ValueError as exc:
            self.errors.add(self._p(key), str(exc))
            return None

    def resources(self, key: str, *, required: bool = False) -> dict[str, float]:
        value = self._get(key, None, required)
        if value is _MISSING:
            return {}
        return read_resources(self.errors, self._p(key), value)

    def labels(self, key: str) -> dict[str, str]:
        value = self._get(key, None, False)
        if value is _MISSING:
            return {}
        path = self._p(key)
        if not isinstance(value, dict):
            self.errors.add(path, "must be an object of strings")
            return {}
        out: dict[str, str] = {}
        for k in sorted(value):
            v = value[k]
            if not isinstance(v, str):
                self.errors.add(f"{path}.{k}", "must be a string")
            else:
                out[k] = v
        return out


# Every number a document holds, in magnitude: PostgreSQL's jsonb keeps 1e308 as the integer it
# equals, which no 64-bit integer holds, so a stored policy could no longer be sent as JSON. Far
# beyond any real amount, minutes or seconds, and exact as a float.
NUMBER_LIMIT = 10**15


def _beyond_limit() -> str:
    return f"must be between -{NUMBER_LIMIT} and {NUMBER_LIMIT}"


def _fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def _range_message(lo: int | None, hi: int | None) -> str:
    if lo is not None and hi is not None:
        return f"must be between {lo} and {hi}"
    if lo is not None:
        return f"must be >= {lo}"
    return f"must be <= {hi}"


def read_resources(errors: _Errors, path: str, value: Any) -> dict[str, float]:
    if not isinstance(value, dict):
        errors.add(path, "must be an object of resource amounts")
        return {}
    out: dict[str, float] = {}
    for name in sorted(value):
        amount = value[name]
        if isinstance(amount, bool) or not isinstance(amount, int | float) or not math.isfinite(amount):
            errors.add(f"{path}.{name}", "must be a number")
        elif amount < 0:
            errors.add(f"{path}.{name}", "must be >= 0")
        elif amount > NUMBER_LIMIT:
            errors.add(f"{path}.{name}", _beyond_limit())
        else:
            out[name] = float(amount)
    return out
