"""Read the environment once, and fail fast with a message naming the variable."""

from __future__ import annotations

import os
from collections.abc import Mapping

from django.core.exceptions import ImproperlyConfigured

TRUE = {"1", "true", "yes", "on"}
FALSE = {"0", "false", "no", "off", ""}


class Environment:
    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        self._env = dict(os.environ if environ is None else environ)

    def str(self, name: str, default: str | None = None) -> str | None:
        return self._env.get(name, default)

    def required(self, name: str) -> str:
        value = self._env.get(name, "").strip()
        if not value:
            raise ImproperlyConfigured(f"{name} must be set in the environment")
        return value

    def bool(self, name: str, default: bool) -> bool:
        raw = self._env.get(name)
        if raw is None:
            return default
        value = raw.strip().lower()
        if value in TRUE:
            return True
        if value in FALSE:
            return False
        raise ImproperlyConfigured(f"{name}={raw!r} is not a boolean (use true or false)")

    def list(self, name: str, default: list[str]) -> list[str]:
        raw = self._env.get(name)
        if raw is None:
            return default
        return [item.strip() for item in raw.split(",") if item.strip()]

    def int(self, name: str, default: int, *, minimum: int | None = None, maximum: int | None = None) -> int:
        raw = self._env.get(name)
        if raw is None:
            return default
        try:
            value = int(raw)
        except ValueError:
            raise ImproperlyConfigured(f"{name}={raw!r} is not an integer") from None
        if minimum is not None and value < minimum:
            raise ImproperlyConfigured(f"{name}={raw!r} must be at least {minimum}")
        if maximum is not None and value > maximum:
            raise ImproperlyConfigured(f"{name}={raw!r} must be at most {maximum}")
        return value


env = Environment()
