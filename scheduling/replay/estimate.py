"""Estimated start times of pending work (Slurm's ``squeue --start``): a short forward replay of a
group's current queue under its current policy, from its current snapshot.

Assumptions (``ASSUMPTIONS``, shown with every estimate): running work ends at its walltime, or
``default_walltime_s`` after it started when it has none (at once if that is already past); work
leaving (checkpointing) is gone after its checkpoint; pending work runs for its walltime or the
default; nothing else is submitted, cancelled, drained or fails meanwhile; the queue keeps the
order the pass gives it now (``order``), and preemptions happen as the policy would make them.
Work that has not started ``horizon_s`` after now has no estimate (None).

The replay is ``Simulation`` itself (the engine's decisions, the pass's apply logic), started from
the snapshot instead of an empty cluster, and stopped once every pending request has started.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from scheduling.engine import Cluster
from scheduling.engine import model as em

from .sim import END, TICK, Simulation
from .spec import ClusterSpec
from .trace import Job

HORIZON_S = 30 * 86400.0
ASSUMPTIONS = ("running work ends at its walltime ({default} after it started when it has none); pending work "
               "runs for its walltime or {default}; nothing else is submitted, cancelled or drained; the queue "
               "keeps its present order and the policy preempts as it would")


def _job(a: em.Allocation, run: float, submit: float) -> Job:
    return Job(id=int(a.id), name=a.id, submit=submit, run=run,
               walltime=a.walltime_minutes * 60 if a.walltime_minutes else None, nodes=a.nodes,
               gpus=a.per_node.get("gpu", 0.0), cpus=a.per_node.get("cpu", 0.0), tenant=a.tenant or "",
               user=a.user, vcluster=a.vcluster, session_type=a.session_type, preemption_class=a.preemption_class,
               priority=a.priority, checkpoint=a.checkpoint, checkpoint_minutes=a.checkpoint_minutes)


def estimate_starts(cluster: Cluster, policy: em.Policy, pending: Iterable[em.Allocation], now: float, *,
                    default_walltime_s: float, horizon_s: float = HORIZON_S,
                    incremental: bool = True) -> dict[int, float | None]:
    """Each pending request's estimated start (seconds since the epoch; ``now`` for one that would
    start at the next pass), or None past the horizon. ``pending`` in the pass's order, holders of
    nodes first with their ``held_nodes``; ``cluster`` is the group's snapshot (not changed)."""
    sim, ids = forward_replay(cluster, policy, pending, now, default_walltime_s=default_walltime_s,
                              horizon_s=horizon_s, incremental=incremental)
    sim.run()
    return {idx: sim.rec.first_start.get(idx) for idx in ids}


def forward_replay(cluster: Cluster, policy: em.Policy, pending: Iterable[em.Allocation], now: float, *,
                   default_walltime_s: float, horizon_s: float = HORIZON_S,
                   incremental: bool = True) -> tuple[Simulation, list[int]]:
    """The replay ``estimate_starts`` runs, ready to run, and the pending requests' ids in order. It
    stops once they have all started (``watch``) or past the horizon (``until``)."""
    pending = list(pending)
    running = [a for a in cluster.allocs.values() if a.placement and not a.id.startswith("hold:")]
    rank = {int(a.id): i for i, a in enumerate(pending)}
    ends = {int(a.id): _end(a, now, default_walltime_s) for a in running}
    jobs = [_job(a, ends[int(a.id)] - (a.started_at if a.started_at is not None else now),
                 a.submitted_at if a.submitted_at is not None else a.started_at if a.started_at is not None else now)
            for a in running]
    for a in pending:
        wall = a.walltime_minutes * 60 if a.walltime_minutes else default_walltime_s
        jobs.append(_job(a, wall, a.submitted_at if a.submitted_at is not None else now))
    spec = ClusterSpec("estimate", list(cluster.nodes.values()), list(cluster.vclusters.values()),
                       list(cluster.session_types.values()), dict(cluster.tenants))
    # The running work, built at once as the pass's snapshot is (one add per allocation costs more).
    start = Cluster(spec.nodes, [replace(a, held_nodes=()) if a.held_nodes else a for a in running],
                    cluster.tenants.values(), spec.vclusters, spec.session_types, use_vclusters=cluster.use_vclusters)
    start.last_preemption_at = cluster.last_preemption_at
    # Only first starts are read: use, queue depth and shares over time are not measured.
    sim = Simulation(sorted(jobs, key=lambda j: j.submit), spec, policy, start=now, bin_s=3600.0, rank=rank,
                     incremental=incremental, cluster=start, measure=False)
    sim.arrivals = []
    sim.borrowed = {n.name: n.borrowed_by for n in cluster.nodes.values() if n.borrowed_by is not None}
    states = [sim.jobs[int(a.id)] for a in running]
    for a, st in zip(running, states, strict=True):
        st.started = a.started_at if a.started_at is not None else now
        st.left = ends[st.idx] - st.started
    sim._push_all((ends[st.idx], END, st.idx, st.epoch) for st in states)
    for a in pending:
        st = sim.jobs[int(a.id)]
        st._req = replace(a, held_nodes=()) if a.held_nodes else a  # the request itself: labels, flags, rank
        st.shape = st.wshape = (a.id,)  # so never taken for another request told to wait
        sim._enqueue(st)
        if a.held_nodes:
            sim.holders[st.idx] = a.held_nodes
    for tenant in cluster.tenants.values():  # starvation already under way goes on from when it began
        since = tenant.below_fair_share_since
        if since is not None and tenant.name in sim.rec.tenants:
            sim.rec.tenants[tenant.name].below_since = since
            for timeout in (policy.starvation_timeout_s, policy.aggressive_starvation_timeout_s):
                if since + timeout > now:
                    sim._push(since + timeout, TICK, 0)
    sim.watch = set(rank)
    sim.until = now + horizon_s
    sim._push(now, TICK, 0)
    return sim, list(rank)


def _end(a: em.Allocation, now: float, default_walltime_s: float) -> float:
    """When running work is assumed to end: at its walltime (or the default) after it started, at
    once if that is past; work leaving after its checkpoint, or at once when stopped."""
    if a.state != "running":
        return now + (a.checkpoint_minutes * 60 if a.state == "checkpointing" else 0.0)
    started = a.started_at if a.started_at is not None else now
    wall = a.walltime_minutes * 60 if a.walltime_minutes else default_walltime_s
    return max(now, started + wall)
