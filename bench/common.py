"""What the benchmark scripts share: percentiles, a free port, a fresh database of their own, the
settings the servers they start run under, and the CPU-time meters, repeats and probe validity
that keep their figures meaningful on a busy machine."""

from __future__ import annotations

import os
import socket
import statistics
import sys
import time
from pathlib import Path
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


# -- figures that survive a busy machine ------------------------------------------------------
# Wall-clock figures on a shared machine carry whatever else ran; the CPU time the measured
# processes spent per unit of work does not (much). Every bench prints both, repeats its
# measurement, and reports the min and the median of the repeats.

MIN_SAMPLES_P99 = 1000  # a p99 from fewer samples is one of its few slowest
CPU_BOUND = 0.90  # a probe or ceiling is valid when its process was at least this busy


def cpu_seconds(*pids: int) -> float:
    """User and system CPU seconds of these processes (every thread of each), from /proc; the
    calling process itself when none is given."""
    if not pids:
        return time.process_time()
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
    return total / tick


class Meter:
    """CPU seconds of the measured processes and wall seconds between ``start`` and ``stop``."""

    def __init__(self, *pids: int) -> None:
        self.pids = pids
        self.cpu = self.wall = 0.0
        self._cpu0 = self._wall0 = 0.0

    def start(self) -> Meter:
        self._cpu0, self._wall0 = cpu_seconds(*self.pids), time.perf_counter()
        return self

    def stop(self) -> Meter:
        self.cpu = cpu_seconds(*self.pids) - self._cpu0
        self.wall = time.perf_counter() - self._wall0
        return self

    @property
    def busy(self) -> float:
        """The share of one core the processes used (1.0: one core all the time)."""
        return self.cpu / self.wall if self.wall > 0 else 0.0


def min_median(values: list[float]) -> tuple[float, float]:
    """The min and the median of repeated measurements (NaN for none)."""
    if not values:
        return float("nan"), float("nan")
    return min(values), statistics.median(values)


def repeats_text(values: list[float], scale: float = 1.0, unit: str = "", digits: int = 2) -> str:
    """'min X, median Y (n repeats)' for repeated measurements, scaled (e.g. 1e3 for ms)."""
    low, mid = min_median(values)
    return f"min {low * scale:,.{digits}f}{unit}, median {mid * scale:,.{digits}f}{unit} ({len(values)} repeats)"


def enough_for(values: list[float], q: float) -> bool:
    """Whether there are enough samples for the q-quantile to mean something (1,000 for a p99)."""
    return len(values) >= (MIN_SAMPLES_P99 if q >= 0.99 else 100)


def verdict(holds: bool, valid: bool = True) -> str:
    """A goal's result: 'not valid' (its probe was not CPU-bound or had too few samples) is never
    a pass."""
    if not valid:
        return "not valid"
    return "holds" if holds else "MISSED"


def print_table(title: str, rows: list[tuple[str, str, str, str]]) -> None:
    """The bench's summary, one row per goal: (goal, CPU-time figure, wall-clock figure, verdict)."""
    print(f"\n== {title}: goals")
    print("| goal | CPU time | wall clock | result |")
    print("|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


def redis_keys(url: str) -> set[bytes]:
    """Every key in the Redis database ``url`` names."""
    import redis  # (only the benches that use Redis need its client loaded)

    return set(redis.Redis.from_url(url).scan_iter(count=1000))


def forget_new_keys(url: str, before: set[bytes]) -> int:
    """Delete the keys that appeared in that database since ``before`` was taken (a bench's
    channel layer and broker keys); nothing else there is touched. Returns how many."""
    import redis  # (as above)

    new = redis_keys(url) - before
    if new:
        redis.Redis.from_url(url).delete(*new)
    return len(new)
