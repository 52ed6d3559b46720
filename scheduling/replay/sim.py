"""A discrete-event replay in virtual time: the engine's ``decide`` on the engine's ``Cluster``, the
pending queue in the pass's order (``passes.ordering``), no clock and no database.

Events (a heap of ``(time, order, seq, job, epoch)``): a job arrives, ends (its work done, or its
walltime reached), or a victim has left (its checkpoint written, or stopped); timers wake a
``fair_share`` group when a tenant would start starving or the preemption backoff ends. After the
events of one instant a pass runs, as the real pass does: holders of nodes first, then the queue
by ``queue_key``; each request decided; fits start, preemptions ask their victims to leave (the
victims hold their nodes until then, the preemptor holds the nodes being freed), waits wait.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable, Iterable
from dataclasses import replace

from scheduling.engine import Cluster, Decision
from scheduling.engine import model as em
from scheduling.passes.ordering import PassReservations, below_since, queue_key, reserve_free

from .incremental import IncrementalPass
from .order import PendingOrder, PendingShapes
from .prune import Bounds
from .spec import ClusterSpec
from .stats import Recorder, TenantUse
from .trace import Job

END, LEFT, ARRIVE, TICK = 0, 1, 2, 3  # at one instant, capacity is given back before arrivals
PASS_BUDGET = 2000  # requests decided per pass, as the real pass (passes/run.py)
# A job running far past the trace's submissions must not make bins of the submissions' width
# for all its run (a run of 1e9 s was 17 million bins, one of 1e300 s an OverflowError).
MAX_RUN_BINS = 10_000


class JobState:
    __slots__ = ("job", "idx", "left", "started", "epoch", "preempted", "leaving", "gpus", "use", "shape", "wshape", "rshape",
                 "_req")

    def __init__(self, job: Job, use: TenantUse) -> None:
        self.job, self.idx, self.use = job, job.id, use
        self.left = job.run  # work still to do, from its last checkpoint
        self.started = 0.0
        self.epoch = 0  # bumped when it is asked to leave: its end event no longer holds
        self.preempted = 0
        self.leaving = ""  # "", "requeue" or "drop"
        self.gpus = job.gpus * job.nodes
        self.shape = (job.tenant, job.user, job.vcluster, job.session_type, job.preemption_class, job.priority,
                      job.checkpoint, job.nodes, job.gpus, job.cpus)
        self.rshape = (job.nodes, job.gpus, job.cpus)
        self.wshape = self.shape  # what the incremental pass compares (see Simulation.__init__)
        self._req: em.Allocation | None = None

    def request(self, held: tuple[str, ...] = ()) -> em.Allocation:
        if self._req is None:
            j = self.job
            per_node = {"gpu": j.gpus, **({"cpu": j.cpus} if j.cpus else {})}
            wall = None if j.walltime is None else (j.walltime - (j.run - self.left)) / 60
            self._req = em.Allocation(
                id=str(j.id), tenant=j.tenant, user=j.user, vcluster=j.vcluster, session_type=j.session_type,
                preemption_class=j.preemption_class, priority=j.priority, checkpoint=j.checkpoint,
                checkpoint_minutes=j.checkpoint_minutes, submitted_at=j.submit, walltime_minutes=wall,
                nodes=j.nodes, per_node=per_node, preempted_count=self.preempted)
        return replace(self._req, held_nodes=held) if held else self._req


class Simulation(IncrementalPass):
    def __init__(self, jobs: list[Job], spec: ClusterSpec, policy: em.Policy, *, seed: int = 0,
                 checkpoint_jitter: float = 0.0, terminate_s: float = 0.0, pass_budget: int = PASS_BUDGET,
                 bin_s: float | None = None, on_progress: Callable[[int, float], None] | None = None,
                 incremental: bool = True, start: float | None = None, rank: dict[int, int] | None = None,
                 cluster: Cluster | None = None, measure: bool = True) -> None:
        """``cluster``: the snapshot to start from (a forward replay's running work; it is changed),
        else an empty one of ``spec``; without ``measure`` only first starts are recorded."""
        self.policy, self.spec = policy, spec
        self.incremental = incremental
        # A given order (the pass's, with a class_cost group's Lattice score) goes before the kind's key;
        # fair_share's order moves with the shares and is always the key's.
        self.rank = rank if rank and policy.kind != "fair_share" else {}
        tenants = spec.tenants_for(jobs)
        self.fair = {t.name: t.fair_share for t in tenants}
        self.cluster = cluster if cluster is not None else Cluster(
            spec.nodes, (), tenants, spec.vclusters, spec.session_types, use_vclusters=bool(spec.vclusters))
        self.nodes = {n.name: n for n in spec.nodes}
        if start is None:
            start = jobs[0].submit if jobs else 0.0
        span = (jobs[-1].submit - start) if jobs else 0.0
        longest = max((j.run for j in jobs), default=0.0)
        total = sum(n.capacity.get("gpu", 0.0) for n in spec.nodes)
        self.rec = Recorder(start, bin_s or max(60.0, span / 100, longest / MAX_RUN_BINS), total, len(spec.nodes), policy.tolerance,
                            policy.starvation_timeout_s, measure=measure)
        self.jobs = {j.id: JobState(j, self.rec.tenant(j.tenant, self.fair.get(j.tenant, 0.0))) for j in jobs}
        self.arrivals = [j.id for j in jobs]
        if policy.kind == "class_cost":
            # A class_cost decision reads of the request only its class, checkpoint, size, vCluster and session
            # type (and flags a trace does not set): requests alike in those get the same answer.
            for st in self.jobs.values():
                j = st.job
                st.wshape = (j.vcluster, j.session_type, j.preemption_class, j.checkpoint, j.nodes, j.gpus, j.cpus)
        self.session_priority = {s.name: s.priority for s in spec.session_types}
        self.session_rank = {s.name: s.rank for s in spec.session_types}
        self.rng = random.Random(seed)
        self.jitter, self.terminate_s, self.budget = checkpoint_jitter, terminate_s, pass_budget
        self.on_progress = on_progress
        self._loop_state()

    def _loop_state(self) -> None:
        """The loop's state before the first event: no event, nothing pending, held or borrowed."""
        self.heap: list[tuple[float, int, int, int, int]] = []
        self.seq = 0
        self.pending: set[int] = set()
        self.holders: dict[int, tuple[str, ...]] = {}
        self.holds: dict[str, em.Allocation] = {}  # the holders' last reservations (``reserve_free``)
        # Nodes this pass's preemptors hold, not yet reserved in the snapshot: as in the real pass,
        # put there only when a later decision would use one of them (``_decide``), so that a
        # preemption does not change the snapshot's version and the engine's kept values stay.
        self.reserving = PassReservations()
        self.demand: dict[str, int] = {}
        self.dirty: set[str] = set()  # tenants whose share or demand moved since the last pass
        self.borrowed: dict[str, str] = {}  # node -> the vCluster borrowing it
        self.done = 0
        self.order = PendingOrder(self.policy.kind == "fair_share")
        self.standing: dict[str, tuple[bool, float]] = {}  # fair_share: each tenant's, as of the last key made
        self.static_key = self._order_key(0.0) if self.policy.kind != "fair_share" else None
        self.rshapes = PendingShapes()
        self.special = 0  # pending sensitive requests (never passed over)
        self.in_vc = 0  # pending requests in a vCluster (never passed over while a node is lent)
        self.bounds = Bounds(self.policy, False)
        # Request shapes (``wshape``) the engine found no victim set for: ``Bounds.reachable`` is read
        # for them before they are decided (for others it would cost more than it saves).
        self.roomless: set[tuple] = set()
        self.engine_calls = 0  # decisions asked of the engine (the benchmark prints it)
        # A forward replay (estimate.py) stops once these have all started, or past ``until``.
        self.watch: set[int] | None = None
        self.until = float("inf")

    # -- the loop -----------------------------------------------------------------
    def run(self) -> Recorder:
        arrivals, nxt = self.arrivals, 0
        jobs, heap = self.jobs, self.heap
        t = self.rec.start
        while nxt < len(arrivals) or heap:
            t = min(heap[0][0] if heap else float("inf"),
                    jobs[arrivals[nxt]].job.submit if nxt < len(arrivals) else float("inf"))
            self.rec.advance(t)
            while heap and heap[0][0] <= t:
                _, kind, _, idx, epoch = heapq.heappop(heap)
                self._event(kind, idx, epoch, t)
            while nxt < len(arrivals) and jobs[arrivals[nxt]].job.submit <= t:
                self._enqueue(jobs[arrivals[nxt]])
                nxt += 1
            self._pass(t)
            if self.on_progress is not None:
                self.on_progress(self.done, t)
            if self.watch is not None and (not self.watch or t >= self.until):
                break
        self.rec.close(t)
        return self.rec

    def _push(self, t: float, kind: int, idx: int, epoch: int = 0) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, kind, self.seq, idx, epoch))

    def _push_all(self, events: Iterable[tuple[float, int, int, int]]) -> None:
        """Many ``_push`` (time, kind, idx, epoch) at once: in this order, the heap made once."""
        for t, kind, idx, epoch in events:
            self.seq += 1
            self.heap.append((t, kind, self.seq, idx, epoch))
        heapq.heapify(self.heap)

    def _event(self, kind: int, idx: int, epoch: int, t: float) -> None:
        st = self.jobs.get(idx)
        if kind == TICK or st is None or epoch != st.epoch:
            return  # a timer only wakes the pass; a stale end was overtaken by a preemption
        if kind == END:
            self._release(st, t)
            self.done += 1
            self.rec.finish[idx] = t
            if st.job.hit_walltime:
                self.rec.walltime_kills += 1
        elif kind == LEFT:
            self._release(st, t)
            if st.leaving == "drop":
                self.done += 1
                self.rec.dropped += 1
                self.rec.finish[idx] = t
            else:
                st.preempted += 1
                st._req = None
                self._enqueue(st)
            st.leaving = ""

    def _enqueue(self, st: JobState) -> None:
        self.pending.add(st.idx)
        self.rec.queue += 1
        self._demand(st.job.tenant, +1)
        if self.incremental:
            key = self.static_key(st.idx)[1] if self.static_key is not None else ()
            self.order.add(st.idx, key, st.job.tenant, st.job.submit)
            self.rshapes.add(st.rshape)
            self.special += st.request().is_sensitive
            self.in_vc += st.job.vcluster is not None

    def _dequeue(self, st: JobState) -> None:
        self.pending.discard(st.idx)
        if self.holders.pop(st.idx, None) is not None:
            self.holds.pop(f"hold:{st.idx}", None)
        self.rec.queue -= 1
        self._demand(st.job.tenant, -1)
        if self.incremental:
            self.order.discard(st.idx)
            self.rshapes.discard(st.rshape)
            self.special -= st.request().is_sensitive
            self.in_vc -= st.job.vcluster is not None

    def _demand(self, tenant: str, delta: int) -> None:
        """Pending requests per tenant; a tenant with none leaves the dict (the passes read the
        standing of these tenants alone)."""
        left = self.demand.get(tenant, 0) + delta
        if left:
            self.demand[tenant] = left
        else:
            self.demand.pop(tenant, None)
        self.dirty.add(tenant)

    # -- the pass -------------------------------------------------------------------
    def _pass(self, t: float) -> None:
        self._track(t)
        if not self.pending:
            return
        if self.incremental:
            self._pass_incremental(t)
            return
        holders = self.holders
        for idx, names in holders.items():
            reserve_free(self.cluster, f"hold:{idx}", list(names), self.holds)
        order = sorted(self.pending, key=self._order_key(t))
        waited: dict[tuple, tuple[int, int]] = {}
        for idx in order[: self.budget + len(holders)]:
            if self._all_started():
                break
            st, cluster = self.jobs[idx], self.cluster  # a loan rebuilds the snapshot
            if idx not in holders and waited.get(st.shape) == (cluster.version, cluster.state_version):
                continue  # the same request was just told to wait on this very state: so is this one
            self._decide(st, t, waited)
        self._unreserve()
        self._track(t)  # what this pass started counts from now (the real pass's next one sees it)

    def _unreserve(self) -> None:
        """The pass's reservations taken out of the snapshot again (the next pass makes them anew)."""
        self.reserving.clear()
        for idx in self.holders:
            self.cluster.remove(f"hold:{idx}")

    def _order_key(self, t: float) -> Callable[[int], tuple]:
        kind, jobs, holders = self.policy.kind, self.jobs, self.holders
        st_prio, st_rank = self.session_priority, self.session_rank
        standing: dict[str, tuple[bool, float]] = {}
        if kind == "fair_share":
            cluster = self.cluster
            shares = cluster.tenant_shares().tolist()  # every tenant's at once: tenant_share's values
            for name in self.demand:
                tenant = cluster.tenant(name)
                since = tenant.below_fair_share_since
                starving = since is not None and t - since >= self.policy.starvation_timeout_s - 1e-9
                i = cluster.tenant_index.get(name)
                share = max(shares[i], 0.0) if i is not None else 0.0
                standing[name] = (starving, tenant.fair_share - share)
        self.standing = standing

        given, last = self.rank, len(self.rank)

        def key(idx: int) -> tuple:
            j = jobs[idx].job
            starving, deficit = standing.get(j.tenant, (False, 0.0))
            ordered = queue_key(
                kind, preemption_class=j.preemption_class, priority=j.priority, submitted_at=j.submit, ident=idx,
                session_priority=st_prio.get(j.session_type or ""), rank=None,
                session_rank=st_rank.get(j.session_type or ""), starving=starving, deficit=deficit)
            return (idx not in holders, (given.get(idx, last), *ordered) if given else ordered)
        return key

    def _track(self, t: float) -> None:
        """Each moved tenant's below-fair-share mark, as a pass's tracking does at its start; in a
        fair_share group the engine's gate reads it, and a timer wakes the pass when it would starve."""
        policy = self.policy
        for name in sorted(self.dirty):
            use = self.rec.tenants.get(name)
            if use is None:
                continue
            since = below_since(self.cluster.tenant_share(name), use.fair_share, policy.tolerance,
                                self.demand.get(name, 0) > 0, use.below_since, t)
            if since == use.below_since:
                continue
            self.rec.below(use, since, t)
            if policy.kind == "fair_share":
                self.cluster.set_below_since(name, since)
                if since is not None:
                    self._push(since + policy.starvation_timeout_s, TICK, 0)
                    if policy.enable_aggressive:
                        self._push(since + policy.aggressive_starvation_timeout_s, TICK, 0)
        self.dirty.clear()

    # -- applying decisions -----------------------------------------------------------
    def _start(self, st: JobState, decision: Decision, t: float) -> None:
        self._dequeue(st)
        req = st.request()
        alloc = replace(req, state="running", started_at=t, placement={n: dict(req.per_node) for n in decision.nodes})
        if decision.borrowed:
            self.reserving.reserve(self.cluster)  # the rebuilt snapshot keeps them, as a reload would
            self._borrow(decision.borrowed, req.vcluster)
        self.cluster.add(alloc)
        self.bounds.work_moved(self.cluster, alloc, +1)
        st.started = t
        self.rec.first_start.setdefault(st.idx, t)
        if self.watch:
            self.watch.discard(st.idx)
        self.rec.hold(st.use, list(decision.nodes), st.gpus, t, +1)
        self.dirty.add(st.job.tenant)
        self._push(t + st.left, END, st.idx, st.epoch)

    def _preempt(self, st: JobState, decision: Decision, t: float) -> None:
        self.rec.preempted(t, [v.reason for v in decision.victims])
        for v in decision.victims:
            self._ask_to_leave(self.jobs[int(v.id)], v.action, v.mode or self.policy.mode, t)
        self.holders[st.idx] = decision.nodes
        self.reserving.add(st.idx, list(decision.nodes))
        self.cluster.last_preemption_at = t
        if self.policy.kind == "fair_share":
            self._push(t + self.policy.preemptive_scheduling_backoff_s, TICK, 0)

    def _ask_to_leave(self, victim: JobState, action: str, mode: str, t: float) -> None:
        """A checkpointing victim keeps its work so far and leaves after its checkpoint (its
        overhead); one stopped loses the work since its last checkpoint, and is requeued unless
        its mode is ``terminate``."""
        self.cluster.set_state(str(victim.idx), "checkpointing" if action == "checkpoint" else "terminating")
        victim.epoch += 1
        ran = t - victim.started
        if action == "checkpoint":
            duration = victim.job.checkpoint_minutes * 60 * (1 + self.jitter * (2 * self.rng.random() - 1))
            victim.left = max(0.0, victim.left - ran)
            self.rec.checkpoint_gpu_s += duration * victim.gpus
            victim.leaving = "requeue"
        else:
            duration = self.terminate_s
            lost = ran + (victim.job.run - victim.left if mode == "terminate" else 0.0)
            self.rec.lost_gpu_s += lost * victim.gpus
            victim.leaving = "drop" if mode == "terminate" else "requeue"
        self._push(t + duration, LEFT, victim.idx, victim.epoch)

    def _release(self, st: JobState, t: float) -> None:
        alloc = self.cluster.remove(str(st.idx))
        if alloc is not None:
            self.bounds.work_moved(self.cluster, alloc, -1)
        nodes = list(alloc.placement) if alloc else []
        self.rec.hold(st.use, nodes, st.gpus, t, -1)
        self.dirty.add(st.job.tenant)
        if self.borrowed and alloc is not None and alloc.vcluster is not None:
            self._give_back(alloc.vcluster, nodes)

    # -- borrowing -------------------------------------------------------------------------
    def _borrow(self, names: tuple[str, ...], vcluster: str | None) -> None:
        for n in names:
            self.borrowed[n] = vcluster or ""
            self.nodes[n] = replace(self.nodes[n], borrowed_by=vcluster)
        self._rebuild()

    def _give_back(self, vcluster: str, nodes: list[str]) -> None:
        """A borrowed node goes home once no work of its borrower is on it (as release.py does)."""
        mine = [n for n in nodes if self.borrowed.get(n) == vcluster]
        if not mine:
            return
        still = {n for a in self.cluster.allocs.values() if a.vcluster == vcluster for n in a.placement}
        back = [n for n in mine if n not in still]
        for n in back:
            del self.borrowed[n]
            self.nodes[n] = replace(self.nodes[n], borrowed_by=None)
        if back:
            self._rebuild()

    def _rebuild(self) -> None:
        """Lending limits live in the cluster's node arrays: a changed loan rebuilds it, as the real
        pass reloads its snapshot after a borrowing placement."""
        old = self.cluster
        self.cluster = Cluster(self.nodes.values(), old.allocs.values(), old.tenants.values(),
                               self.spec.vclusters, self.spec.session_types, use_vclusters=bool(self.spec.vclusters))
        self.cluster.last_preemption_at = old.last_preemption_at
