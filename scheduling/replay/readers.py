"""Trace readers: the Standard Workload Format of the Parallel Workloads Archive and the Slurm CSV
of the Compute Canada trace. A reader yields ``Record``s (a job's times and size plus the texts
of the columns the mapping reads); ``build_jobs`` maps them to ``Job``s. A line that cannot be
read is counted by reason and skipped, or stops the read under ``strict``."""

from __future__ import annotations

import csv
import gzip
import io
import lzma
import math
import zipfile
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import IO

from scheduling.engine.reader import NUMBER_LIMIT

from .mapping import Mapping, OutOfRange
from .trace import Job, ReadStats, ReplayError

FORMATS = ("swf", "slurm-csv", "lattice")
SWF_COLUMNS = ["job", "submit", "wait", "run", "procs", "cpu_time", "memory", "req_procs", "req_time",
               "req_memory", "status", "user", "group", "app", "queue", "partition", "preceding", "think"]
SLURM_NEEDED = ["job_id", "submit_time", "run_time_sec", "time_limit_sec", "req_gpus", "alloc_nodes"]


@dataclass(frozen=True, slots=True)
class Record:
    line: int
    name: str
    submit: float
    run: float
    walltime: float | None
    gpus: float  # in all
    nodes: int  # 0: as many as the GPUs need
    cpus: float  # in all
    raw: tuple[str | None, ...]  # the mapping's columns, in Mapping.columns() order


def guess_format(path: str) -> str:
    name = path.lower()
    if ".swf" in name:
        return "swf"
    if ".csv" in name:
        return "slurm-csv"
    raise ReplayError(f"cannot tell the format of {path}: give --format ({', '.join(FORMATS)})")


def open_text(path: str) -> IO[str]:
    """A trace as text: plain, gzip, or the one file of a zip (its folders' entries and macOS's
    ``__MACOSX/`` copies passed over; a zip of several traces is refused, naming them)."""
    try:
        if path.endswith(".gz"):
            return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", errors="replace")
        if path.endswith(".zip"):
            archive = zipfile.ZipFile(path)
            files = [entry for entry in archive.infolist()
                     if not entry.is_dir() and not entry.filename.startswith("__MACOSX/")]
            if not files:
                raise ReplayError(f"cannot read {path}: the zip archive holds no file")
            if len(files) > 1:
                names = ", ".join(repr(entry.filename) for entry in files[:3]) + (", ..." if len(files) > 3 else "")
                raise ReplayError(f"cannot read {path}: the zip archive holds {len(files)} files ({names}); "
                                  f"a trace is one file")
            return io.TextIOWrapper(archive.open(files[0].filename), encoding="utf-8", errors="replace")
        return open(path, encoding="utf-8", errors="replace")
    except (OSError, zipfile.BadZipFile) as exc:
        raise ReplayError(f"cannot read {path}: {exc}") from exc
    except RuntimeError as exc:  # zipfile: an encrypted file, a compression it does not have (Deflate64)
        raise ReplayError(f"cannot read {path}: {exc}") from exc


# What reading a compressed trace raises past its opening, where its content is broken.
UNREADABLE = (OSError, EOFError, zlib.error, lzma.LZMAError, zipfile.BadZipFile)


class LineError(ValueError):
    """Why one line could not be read (its reason is counted)."""


def _num(text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise LineError(f"not a number in {what}") from None
    if math.isnan(value) or math.isinf(value):
        raise LineError(f"not a number in {what}")
    return value


def _size(text: str, what: str) -> float:
    """A time or a size the replay computes with: at most 10**15 in magnitude, as every number of the
    engine's documents (a run of 1e308 s overflows the simulation's sums to infinity and NaN)."""
    value = _num(text, what)
    if abs(value) > NUMBER_LIMIT:
        raise LineError(f"{what} past {NUMBER_LIMIT}")
    return value


def read_swf(lines: Iterable[str], columns: list[str], stats: ReadStats, strict: bool) -> Iterator[Record]:
    """SWF: 18 whitespace-separated fields per job; ``;`` starts a comment (the header's
    ``UnixStartTime`` makes submit times absolute). -1 means unknown."""
    base = 0.0
    picks = [SWF_COLUMNS.index(c) for c in columns]
    for number, line in enumerate(lines, 1):
        text = line.strip()
        if not text:
            continue
        if text.startswith(";"):
            key, _, value = text[1:].partition(":")
            if key.strip() == "UnixStartTime":
                base = _start_time(number, value.strip())
            continue
        stats.lines += 1
        try:
            yield _swf_record(number, text.split(), base, picks)
        except LineError as exc:
            _bad(stats, number, str(exc), strict)


def _start_time(number: int, text: str) -> float:
    try:
        value = float(text or 0)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise ReplayError(f"line {number}: UnixStartTime {text!r} is not a number")
    if abs(value) > NUMBER_LIMIT:
        raise ReplayError(f"line {number}: UnixStartTime {text!r} is past {NUMBER_LIMIT}")
    return value


_SWF_SIZES = {SWF_COLUMNS.index(c) for c in ("submit", "run", "procs", "req_procs", "req_time")}


def _swf_record(number: int, parts: list[str], base: float, picks: list[int]) -> Record:
    if len(parts) != 18:
        raise LineError(f"{len(parts)} fields, SWF has 18")
    values = [(_size if i in _SWF_SIZES else _num)(p, SWF_COLUMNS[i]) for i, p in enumerate(parts)]
    run = values[3]
    if run < 0:
        raise LineError("no run time")
    procs = values[4] if values[4] > 0 else values[7]
    if procs <= 0:
        raise LineError("no processors")
    walltime = values[8] if values[8] > 0 else None
    raw = tuple(None if parts[i] == "-1" else parts[i] for i in picks)
    return Record(number, parts[0], base + values[1], run, walltime, procs, 0, 0.0, raw)


def read_slurm_csv(lines: Iterable[str], columns: list[str], stats: ReadStats, strict: bool) -> Iterator[Record]:
    """The Compute Canada Slurm CSV: a header line, then one job per line."""
    reader = csv.reader(lines)
    try:
        header = next(reader, None) or []
    except csv.Error as exc:
        raise ReplayError(f"slurm-csv: the header is not CSV: {exc}") from None
    missing = [c for c in SLURM_NEEDED if c not in header]
    if missing:
        raise ReplayError(f"slurm-csv: the header has no column {missing[0]!r}")
    at = {c: header.index(c) for c in header}
    picks = [at[c] for c in columns]
    cpus_at = at.get("req_cpus")
    for number, row in enumerate(_rows(reader), 2):
        stats.lines += 1
        try:
            if isinstance(row, csv.Error):
                raise LineError(f"not CSV: {row}")
            if len(row) != len(header):
                raise LineError(f"{len(row)} fields, the header has {len(header)}")
            yield _slurm_record(number, row, at, picks, cpus_at)
        except LineError as exc:
            _bad(stats, number, str(exc), strict)


def _rows(reader: Iterator[list[str]]) -> Iterator[list[str] | csv.Error]:
    """The reader's rows, and in place of a row it cannot read (a field past the csv module's
    limit) its error: the reader goes on with the next line."""
    while True:
        try:
            yield next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            yield exc


def _slurm_record(number: int, row: list[str], at: dict[str, int], picks: list[int], cpus_at: int | None) -> Record:
    try:
        submit = datetime.strptime(row[at["submit_time"]], "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC).timestamp()
    except ValueError:
        raise LineError("bad submit_time") from None
    run = _size(row[at["run_time_sec"]], "run_time_sec")
    if run < 0:
        raise LineError("no run time")
    limit = _size(row[at["time_limit_sec"]] or "0", "time_limit_sec")
    gpus = _size(row[at["req_gpus"]] or "0", "req_gpus")
    nodes = _size(row[at["alloc_nodes"]] or "1", "alloc_nodes")
    if gpus < 0 or nodes < 1:
        raise LineError("bad size")
    cpus = _size(row[cpus_at] or "0", "req_cpus") if cpus_at is not None else 0.0
    raw = tuple(row[i] or None for i in picks)
    return Record(number, row[at["job_id"]], submit, run, limit if limit > 0 else None, gpus, int(nodes), cpus, raw)


def _bad(stats: ReadStats, number: int, reason: str, strict: bool) -> None:
    stats.bad_line(number, reason)
    if strict:
        raise ReplayError(f"line {number}: {reason} (--strict)")


def build_jobs(records: Iterable[Record], mapping: Mapping, stats: ReadStats, gpus_per_node: float,
               window: tuple[float | None, float | None] = (None, None), limit: int | None = None,
               strict: bool = False) -> list[Job]:
    """Map records to jobs: in submission order, within the dates, at most ``limit``; ids count
    from 1 in that order. A record whose class or priority is out of range is a bad line."""
    start, until = window
    kept: list[Record] = []
    for rec in records:
        reason = _skip(rec, mapping, start, until)
        if reason:
            stats.skipped[reason] += 1
        else:
            kept.append(rec)
    kept.sort(key=lambda r: (r.submit, r.line))
    if limit is not None and len(kept) > limit:
        stats.skipped["past --jobs"] += len(kept) - limit
        kept = kept[:limit]
    columns = mapping.columns()
    for rule in mapping.rules.values():
        if rule.quartiles is not None and rule.source is not None:
            i = columns.index(rule.source)
            rule.fit_quartiles([float(r.raw[i]) for r in kept if r.raw[i] not in (None, "")
                                and _is_number(r.raw[i])])
    jobs: list[Job] = []
    for rec in kept:
        try:
            jobs.append(_job(len(jobs) + 1, rec, mapping, columns, gpus_per_node))
        except OutOfRange as exc:
            _bad(stats, rec.line, str(exc), strict)
    stats.jobs = len(jobs)
    return jobs


def _is_number(text: str | None) -> bool:
    try:
        float(text or "")
        return True
    except ValueError:
        return False


def _skip(rec: Record, mapping: Mapping, start: float | None, until: float | None) -> str | None:
    if start is not None and rec.submit < start:
        return "before --from"
    if until is not None and rec.submit >= until:
        return "after --until"
    if rec.gpus * mapping.gpus_per_processor < mapping.min_gpus:
        return "fewer GPUs than min_gpus"
    return None


def _job(ident: int, rec: Record, mapping: Mapping, columns: list[str], gpus_per_node: float) -> Job:
    values = dict(zip(columns, rec.raw, strict=True))
    rules = mapping.rules
    get = {name: rule.apply(values.get(rule.source) if rule.source else None) for name, rule in rules.items()}
    total = rec.gpus * mapping.gpus_per_processor
    nodes = rec.nodes or max(1, math.ceil(total / gpus_per_node - 1e-9)) if gpus_per_node > 0 else 1
    per_node = math.ceil(total / nodes - 1e-9) if total > 0 else 0.0
    hit = rec.walltime is not None and rec.run > rec.walltime
    return Job(id=ident, name=rec.name, submit=rec.submit, run=min(rec.run, rec.walltime) if hit and rec.walltime
               else rec.run, walltime=rec.walltime, nodes=nodes, gpus=float(per_node), cpus=rec.cpus / nodes,
               tenant=get["tenant"] or "default", user=get["user"], vcluster=get["vcluster"],
               session_type=get["session_type"], preemption_class=int(get["class"] or 0),
               priority=int(get["priority"] if get["priority"] is not None else 10),
               checkpoint=get["checkpoint"] or "none", checkpoint_minutes=mapping.checkpoint_minutes, hit_walltime=hit)
