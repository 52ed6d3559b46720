"""The replay's sources in this database: a resource group as the cluster (its nodes, vClusters,
session types, tenants' fair shares, policy) and its allocations between two dates as the trace
(``--format lattice``). Read once, before the simulation; nothing is written."""

from __future__ import annotations

from datetime import datetime

from scheduling.engine import model as em
from scheduling.models import Allocation, ResourceGroup
from scheduling.passes.snapshot import load_snapshot

from .mapping import FIELDS, Mapping, load_mapping
from .readers import Record, build_jobs
from .spec import ClusterSpec
from .trace import Job, ReadStats, ReplayError

LATTICE_COLUMNS = ["tenant", "user", "vcluster", "session_type", "preemption_class", "priority", "checkpoint"]
_VALUES = {"tenant": "tenant__name", "user": "user__username", "vcluster": "vcluster__name",
           "session_type": "session_type__name", "preemption_class": "preemption_class", "priority": "priority",
           "checkpoint": "checkpoint"}
assert len(FIELDS) == len(LATTICE_COLUMNS)


def group_of(name: str) -> ResourceGroup:
    group = ResourceGroup.objects.filter(name=name).first()
    if group is None:
        raise ReplayError(f"no resource group {name!r}")
    return group


def spec_from_group(group: ResourceGroup) -> tuple[ClusterSpec, em.Policy]:
    """The group as its pass sees it (the same loader), with no work on it."""
    snap = load_snapshot(group)
    cluster = snap.cluster
    nodes = [em.Node(name=n.name, capacity=n.capacity, labels=n.labels, vcluster=n.vcluster)
             for n in cluster.nodes.values()]
    tenants = {t.name: em.Tenant(name=t.name, fair_share=t.fair_share, burst_allowance=t.burst_allowance)
               for t in cluster.tenants.values()}
    spec = ClusterSpec(name=group.name, nodes=nodes, vclusters=list(cluster.vclusters.values()),
                       session_types=list(cluster.session_types.values()), tenants=tenants)
    return spec, snap.policy


def history_jobs(group: ResourceGroup, since: datetime | None, until: datetime | None, mapping_path: str | None,
                 spec: ClusterSpec, limit: int | None) -> tuple[list[Job], ReadStats]:
    """The group's allocations submitted between the dates that ran: their run time is from their
    first start to their end (work still running counts up to ``until`` or now)."""
    mapping = load_mapping("lattice", mapping_path)
    mapping.check_columns(LATTICE_COLUMNS)
    qs = Allocation.objects.filter(resource_group=group, started_at__isnull=False).order_by("submitted_at", "id")
    if since is not None:
        qs = qs.filter(submitted_at__gte=since)
    if until is not None:
        qs = qs.filter(submitted_at__lt=until)
    stats = ReadStats()
    records = list(_records(qs, mapping, until))
    stats.lines = len(records)
    jobs = spec.admit(build_jobs(records, mapping, stats, spec.gpus_per_node, limit=limit), stats.skipped)
    stats.jobs = len(jobs)
    return jobs, stats


def _records(qs: object, mapping: Mapping, until: datetime | None) -> list[Record]:
    out = []
    columns = mapping.columns()
    fields = ["id", "submitted_at", "started_at", "ended_at", "walltime_minutes", "node_count", "per_node_gpu",
              "per_node_cpu", *_VALUES.values()]
    for n, row in enumerate(qs.values(*fields), 1):  # type: ignore[attr-defined]
        end = row["ended_at"] or until or datetime.now(row["started_at"].tzinfo)
        run = max(0.0, (end - row["started_at"]).total_seconds())
        wall = row["walltime_minutes"] * 60 if row["walltime_minutes"] else None
        nodes = row["node_count"] or 1
        raw = tuple(None if row[_VALUES[c]] is None else str(row[_VALUES[c]]) for c in columns)
        out.append(Record(n, str(row["id"]), row["submitted_at"].timestamp(), run, wall,
                          float(row["per_node_gpu"] * nodes), nodes, float(row["per_node_cpu"] * nodes), raw))
    return out
