"""Tests: development settings, a fast hasher, and a private var dir."""

import atexit
import os
import shutil
import tempfile
from pathlib import Path

from .dev import *  # noqa: F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# Worker threads (database_sync_to_async, racing-submission tests) must not keep
# connections open past their work, or the test database cannot be dropped.
DATABASES["default"]["CONN_MAX_AGE"] = 0  # noqa: F405
DATABASES["default"].get("OPTIONS", {}).pop("pool", None)  # noqa: F405  (created and dropped per run)

# Each test process keeps its own cache: a test database starts its ids again, and a shared
# cache would answer with another run's documents.
CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

# The var dir's run-time use is the passes' file locks on SQLite (scheduling/passes/locks.py):
# the tests' own, so that a `make run` of the same checkout and a test run never hold each
# other's group locks. One per test session; the processes it starts inherit it. An explicit
# LATTICE_VAR_DIR (a test starting a server of its own) still wins.
if not os.environ.get("LATTICE_VAR_DIR"):
    if not os.environ.get("LATTICE_TEST_VAR_DIR"):  # this session's first process: it made it, it removes it
        os.environ["LATTICE_TEST_VAR_DIR"] = tempfile.mkdtemp(prefix="lattice-test-var-")
        atexit.register(shutil.rmtree, os.environ["LATTICE_TEST_VAR_DIR"], ignore_errors=True)
    VAR_DIR = Path(os.environ["LATTICE_TEST_VAR_DIR"])
