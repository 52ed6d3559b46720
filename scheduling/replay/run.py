"""Reading a trace and replaying it under one or more policies, outside Django: the ``replay``
command and bench/replay.py both go through here (``history`` gives the database's sources)."""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TextIO

from scheduling.engine import model as em

from .mapping import load_mapping
from .progress import Progress
from .readers import (
    FORMATS,
    SWF_COLUMNS,
    UNREADABLE,
    build_jobs,
    open_text,
    read_slurm_csv,
    read_swf,
)
from .report import policy_report
from .sim import Simulation
from .spec import ClusterSpec
from .trace import Job, ReadStats, ReplayError


def check_format(fmt: str) -> str:
    if fmt not in FORMATS:
        raise ReplayError(f"unknown format {fmt!r} (known: {', '.join(FORMATS)})")
    return fmt


def load_trace(path: str, fmt: str, mapping_path: str | None, spec: ClusterSpec, *,
               window: tuple[float | None, float | None] = (None, None), limit: int | None = None,
               strict: bool = False) -> tuple[list[Job], ReadStats]:
    """A trace file read, mapped and admitted to ``spec``'s cluster."""
    mapping = load_mapping(check_format(fmt), mapping_path)
    stats = ReadStats()
    with open_text(path) as lines:
        try:
            if fmt == "swf":
                mapping.check_columns(SWF_COLUMNS)
                records = read_swf(lines, mapping.columns(), stats, strict)
            else:
                header = lines.readline()
                mapping.check_columns(_header(header))
                records = read_slurm_csv(_chain(header, lines), mapping.columns(), stats, strict)
            jobs = build_jobs(records, mapping, stats, spec.gpus_per_node, window, limit, strict)
        except UNREADABLE as exc:  # a compressed trace broken past its start
            raise ReplayError(f"cannot read {path}: {exc}") from exc
    jobs = spec.admit(jobs, stats.skipped)
    stats.jobs = len(jobs)
    return jobs, stats


def _header(line: str) -> list[str]:
    if not line.strip():
        raise ReplayError("slurm-csv: the trace is empty or its first line is blank: the first line must be the header")
    try:
        return next(csv.reader([line]), [])
    except csv.Error as exc:
        raise ReplayError(f"slurm-csv: the header is not CSV: {exc}") from None


def _chain(first: str, rest: Iterable[str]) -> Iterator[str]:
    yield first
    yield from rest


def replay(jobs: list[Job], spec: ClusterSpec, policies: list[tuple[str, em.Policy]], *, seed: int = 0,
           checkpoint_jitter: float = 0.0, progress: TextIO | None = None,
           simulation: Callable[..., Simulation] = Simulation) -> list[dict[str, Any]]:
    """Each policy's section of the report, in order."""
    out = []
    for name, policy in policies:
        bar = Progress(progress, len(jobs), name)
        sim = simulation(jobs, spec, policy, seed=seed, checkpoint_jitter=checkpoint_jitter, on_progress=bar)
        rec = sim.run()
        bar.finish()
        out.append(policy_report(name, policy, jobs, rec))
    return out
