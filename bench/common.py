"""What the benchmark scripts share: percentiles, a free port, a fresh database of their own, and
the settings the servers they start run under."""

from __future__ import annotations

import os
import socket
import sys
from urllib.parse import urlparse, urlunparse


def pct(values: list[float], q: float) -> float:
    """The q-quantile (0..1) by rank; NaN for no values."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * (len(ordered) - 1)))] if ordered else float("nan")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def fresh_database(url: str, suffix: str) -> str:
    """Drop and create the database named by ``url`` plus ``suffix``; returns its URL."""
    import psycopg

    parts = urlparse(url)
    name = (parts.path.lstrip("/") or "lattice") + suffix
    with psycopg.connect(urlunparse(parts._replace(path="/postgres")), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    return urlunparse(parts._replace(path=f"/{name}"))


def bench_database(suffix: str, script: str) -> str:
    """A fresh database of the script's own next to ``DATABASE_URL``; exit 2 unless it is PostgreSQL."""
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith(("postgres://", "postgresql://")):
        sys.stderr.write(f"{script} needs DATABASE_URL pointing at PostgreSQL\n")
        sys.exit(2)
    return fresh_database(url, suffix)


def use_bench_settings(url: str, redis_url: str = "", log_level: str = "ERROR") -> dict[str, str]:
    """Point this process (and the servers it starts, which inherit its environment) at ``url``
    with the development settings as deployed: DEBUG off, so Django neither records nor formats
    every query. Returns the environment for subprocesses."""
    os.environ.update({"DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "lattice_site.settings.dev",
                       "DEBUG": "false", "ALLOWED_HOSTS": "127.0.0.1", "LOG_LEVEL": log_level})
    if redis_url:
        os.environ["REDIS_URL"] = redis_url
    else:
        os.environ.pop("REDIS_URL", None)  # the in-process channel layer
    return dict(os.environ)
