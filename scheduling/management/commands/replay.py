"""manage.py replay TRACE: evaluate policies on a workload in virtual time (docs/replay.md)."""

from __future__ import annotations

import json
import os
import sys
from datetime import UTC, datetime
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from scheduling.engine import model as em
from scheduling.management.database import require_migrated
from scheduling.replay import history
from scheduling.replay.html import render
from scheduling.replay.readers import guess_format
from scheduling.replay.report import report
from scheduling.replay.run import check_format, load_trace, replay
from scheduling.replay.spec import ClusterSpec, load_policy, load_spec
from scheduling.replay.trace import Job, ReadStats, ReplayError


def _date(text: str | None) -> datetime | None:
    if text is None:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ReplayError(f"not a date: {text!r} (YYYY-MM-DD or ISO 8601)") from None
    moment = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    try:
        moment.astimezone(UTC)  # the database compares in UTC: a date past year 1 to 9999 there is none
    except OverflowError:
        raise ReplayError(f"date out of range: {text!r} (in UTC it is before year 1 or after 9999)") from None
    return moment


REPORT_FILES = ("replay.json", "replay.html")


def _check_out(out: str) -> None:
    """--out must be a directory this user can write in, or one it can make."""
    where = os.path.abspath(out)
    if os.path.exists(where) and not os.path.isdir(where):
        raise ReplayError(f"--out {out}: not a directory")
    for name in REPORT_FILES:
        if os.path.isdir(os.path.join(where, name)):
            raise ReplayError(f"--out {out}: {name} there is a directory")
    while not os.path.exists(where):
        where = os.path.dirname(where)
    if not os.path.isdir(where):
        raise ReplayError(f"--out {out}: {where} is not a directory")
    if not os.access(where, os.W_OK | os.X_OK):
        raise ReplayError(f"--out {out}: cannot write in {where}")


def _write_out(out: str, doc: dict[str, Any]) -> None:
    """replay.json and replay.html, both rendered before either is written, each written beside its
    place and moved there once both are: a failure to write (a full disk) leaves the directory as it
    was, never half a report."""
    texts = [json.dumps(doc, indent=1, sort_keys=True), render(doc)]
    temps = [os.path.join(out, f".{name}.tmp") for name in REPORT_FILES]
    try:
        os.makedirs(out, exist_ok=True)
        for temp, text in zip(temps, texts, strict=True):
            with open(temp, "w", encoding="utf-8") as f:
                f.write(text)
        for temp, name in zip(temps, REPORT_FILES, strict=True):
            os.replace(temp, os.path.join(out, name))
    except (OSError, UnicodeError) as exc:
        raise ReplayError(f"--out {out}: {exc}") from None
    finally:
        for temp in temps:
            if os.path.exists(temp):
                os.remove(temp)


class Command(BaseCommand):
    help = "Replay a workload trace through one or more policies and report what each would have done."
    requires_system_checks: list[str] = []
    requires_migrations_checks = False

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("trace", help="trace file (swf, slurm-csv; .gz/.zip read as they are), or with "
                                          "--format lattice the resource group whose history to replay")
        parser.add_argument("--format", dest="fmt", help="swf, slurm-csv or lattice (default: from the file name)")
        where = parser.add_mutually_exclusive_group(required=True)
        where.add_argument("--cluster", help="cluster spec (JSON)")
        where.add_argument("--group", help="a resource group of this database as the cluster")
        parser.add_argument("--policy", help="policy (JSON); with --group, default: the group's")
        parser.add_argument("--compare", nargs="+", default=[], help="more policies, side by side")
        parser.add_argument("--jobs", type=int, help="the first N jobs (after --from/--until)")
        parser.add_argument("--from", dest="since", help="only jobs submitted from this date (UTC)")
        parser.add_argument("--until", help="only jobs submitted before this date (UTC)")
        parser.add_argument("--out", help="directory for replay.json and replay.html")
        parser.add_argument("--json", action="store_true", help="print the JSON report; no progress bar")
        parser.add_argument("--seed", type=int, default=0, help="seed of the checkpoint durations' jitter")
        parser.add_argument("--checkpoint-jitter", type=float, default=0.0,
                            help="checkpoint durations vary by up to this fraction (0..1), drawn from --seed")
        parser.add_argument("--mapping", help="mapping of trace columns (JSON)")
        parser.add_argument("--strict", action="store_true", help="a bad line stops the replay")

    def handle(self, *args: Any, **o: Any) -> None:
        try:
            if o["out"]:
                _check_out(o["out"])  # before the replay, which may take minutes
            doc = self._run(o)
            if o["out"]:
                _write_out(o["out"], doc)
        except ReplayError as exc:
            raise CommandError(str(exc), returncode=2) from None
        if o["json"]:
            self.stdout.write(json.dumps(doc, sort_keys=True))
        else:
            self._summary(doc)

    def _run(self, o: dict[str, Any]) -> dict[str, Any]:
        fmt = check_format(o["fmt"] or guess_format(o["trace"]))
        if fmt == "lattice" or o["group"]:  # this database's history or resource group
            require_migrated()
        if o["jobs"] is not None and o["jobs"] < 1:
            raise ReplayError("--jobs must be a positive number of jobs")
        if not 0 <= o["checkpoint_jitter"] <= 1:
            raise ReplayError("--checkpoint-jitter must be between 0 and 1")
        spec, group_policy = self._cluster(o)
        policy_files = ([o["policy"]] if o["policy"] else []) + o["compare"]
        policies = [(os.path.splitext(os.path.basename(p))[0], load_policy(p)) for p in policy_files]
        if not o["policy"]:
            if group_policy is None:
                raise ReplayError("--policy is required with --cluster")
            policies.insert(0, (o["group"], group_policy))
        jobs, stats = self._jobs(fmt, o, spec)
        quiet = o["json"] or o["verbosity"] == 0
        if not quiet:
            sys.stderr.write(stats.message() + "\n")
        sections = replay(jobs, spec, policies, seed=o["seed"], checkpoint_jitter=o["checkpoint_jitter"],
                          progress=None if quiet else sys.stderr)
        trace = {"source": os.path.basename(o["trace"]), "format": fmt, **stats.to_dict(),
                 "first_submit": jobs[0].submit if jobs else None, "last_submit": jobs[-1].submit if jobs else None}
        settings = {"seed": o["seed"], "checkpoint_jitter": o["checkpoint_jitter"], "jobs": o["jobs"],
                    "from": o["since"], "until": o["until"], "mapping": o["mapping"] and os.path.basename(o["mapping"])}
        return report(trace, spec.describe(), settings, sections)

    def _cluster(self, o: dict[str, Any]) -> tuple[ClusterSpec, em.Policy | None]:
        if o["cluster"]:
            return load_spec(o["cluster"]), None
        return history.spec_from_group(history.group_of(o["group"]))

    def _jobs(self, fmt: str, o: dict[str, Any], spec: ClusterSpec) -> tuple[list[Job], ReadStats]:
        since, until = _date(o["since"]), _date(o["until"])
        if since is not None and until is not None and since >= until:
            raise ReplayError(f"--from {o['since']} is not before --until {o['until']}: no job could be replayed")
        if fmt == "lattice":
            return history.history_jobs(history.group_of(o["trace"]), since, until, o["mapping"], spec, o["jobs"])
        window = (since.timestamp() if since else None, until.timestamp() if until else None)
        return load_trace(o["trace"], fmt, o["mapping"], spec, window=window, limit=o["jobs"], strict=o["strict"])

    def _summary(self, doc: dict[str, Any]) -> None:
        keys = ("gpu_utilisation", "wait_p50_s", "wait_p95_s", "wait_p99_s", "bounded_slowdown_mean",
                "preemptions", "victims", "gpu_hours_lost", "checkpoint_gpu_hours", "starving_hours")
        names = [p["name"] for p in doc["policies"]]
        self.stdout.write("figure".ljust(24) + "".join(n[:18].rjust(20) for n in names))
        for k in keys:
            self.stdout.write(k.ljust(24) + "".join(str(p["summary"][k]).rjust(20) for p in doc["policies"]))
