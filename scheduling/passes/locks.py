"""One pass at a time per resource group, across processes."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
from collections.abc import Iterator

from django.conf import settings
from django.db import connection

from scheduling.models import ResourceGroup


@contextlib.contextmanager
def group_lock(group: ResourceGroup) -> Iterator[bool]:
    """Exclusive per resource group (a PostgreSQL advisory lock, or a file lock on SQLite);
    yields False when another pass holds it."""
    if connection.vendor == "postgresql":
        key = int.from_bytes(hashlib.sha256(f"lattice-rg-{group.pk}".encode()).digest()[:8], "big", signed=True)
        with connection.cursor() as cur:
            cur.execute("SELECT pg_try_advisory_lock(%s)", [key])
            got = bool(cur.fetchone()[0])
        try:
            yield got
        finally:
            if got:
                with connection.cursor() as cur:
                    cur.execute("SELECT pg_advisory_unlock(%s)", [key])
        return
    lock_dir = settings.VAR_DIR / "locks"
    lock_dir.mkdir(parents=True, exist_ok=True)
    with open(lock_dir / f"rg-{group.pk}.lock", "w") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
