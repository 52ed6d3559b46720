"""Tests: development settings, a fast hasher, and a private var dir."""

from .dev import *  # noqa: F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# Worker threads (database_sync_to_async, racing-submission tests) must not keep
# connections open past their work, or the test database cannot be dropped.
DATABASES["default"]["CONN_MAX_AGE"] = 0  # noqa: F405
DATABASES["default"].get("OPTIONS", {}).pop("pool", None)  # noqa: F405  (created and dropped per run)

# Each test process keeps its own cache: a test database starts its ids again, and a shared
# cache would answer with another run's documents.
CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
