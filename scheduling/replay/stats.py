"""What a replay measures while it runs: time-weighted use and queue depth in bins of virtual
time, each tenant's GPU use (its share over time) and time below its fair share and starving,
preemptions by reason with their victims, work lost and checkpoint overhead, and every job's
first start and end. ``report`` turns it into figures."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


@dataclass
class TenantUse:
    fair_share: float
    gpus: float = 0.0
    since: float = 0.0  # when ``gpus`` last changed
    gpu_seconds: float = 0.0
    bins: list[float] = field(default_factory=list)  # GPU-seconds per bin
    below_since: float | None = None
    below_s: float = 0.0
    starving_s: float = 0.0


class Bins:
    """Sums over fixed-width bins of virtual time from ``start``; grows as time goes on."""

    def __init__(self, start: float, width: float) -> None:
        self.start, self.width = start, width

    def spread(self, sums: list[float], t0: float, t1: float, amount: float) -> None:
        """Add ``amount`` per second over [t0, t1) to the bins it covers."""
        if t1 <= t0 or amount == 0:
            return
        first = max(0, int((t0 - self.start) // self.width))
        last = max(0, int((t1 - self.start) // self.width))
        if len(sums) <= last:
            sums.extend([0.0] * (last + 1 - len(sums)))
        if first == last:
            sums[first] += amount * (t1 - t0)
            return
        sums[first] += amount * (self.start + (first + 1) * self.width - t0)
        for b in range(first + 1, last):
            sums[b] += amount * self.width
        sums[last] += amount * (t1 - (self.start + last * self.width))

    def count(self, sums: list[float], t: float) -> None:
        b = max(0, int((t - self.start) // self.width))
        if len(sums) <= b:
            sums.extend([0.0] * (b + 1 - len(sums)))
        sums[b] += 1


class Recorder:
    def __init__(self, start: float, width: float, total_gpus: float, nodes: int, tolerance: float,
                 starvation_s: float, *, measure: bool = True) -> None:
        # Without ``measure`` (a start estimate reads only ``first_start``) use, queue and tenants'
        # GPU-seconds are not integrated: ``advance`` and ``hold`` only keep the time.
        self.measure = measure
        self.bins = Bins(start, width)
        self.start = self.now = start
        self.total_gpus, self.node_count = total_gpus, nodes
        self.tolerance, self.starvation_s = tolerance, starvation_s
        self.busy_gpus = 0.0
        self.node_refs: Counter = Counter()
        self.queue = 0
        self.gpu_area = self.node_area = self.queue_area = 0.0
        self.gpu_bins: list[float] = []
        self.node_bins: list[float] = []
        self.queue_bins: list[float] = []
        self.preempt_bins: list[float] = []
        self.tenants: dict[str, TenantUse] = {}
        self.preemptions: Counter = Counter()  # victims by reason
        self.decisions = 0
        self.victims_per: Counter = Counter()  # preemptions by number of victims
        self.lost_gpu_s = 0.0
        self.checkpoint_gpu_s = 0.0
        self.walltime_kills = 0
        self.dropped = 0  # victims stopped for good (mode terminate)
        self.first_start: dict[int, float] = {}
        self.finish: dict[int, float] = {}

    def advance(self, t: float) -> None:
        """Integrate the state held since the last call up to ``t``."""
        if t <= self.now:
            return
        if not self.measure:
            self.now = t
            return
        t0 = self.now
        busy_nodes = len(self.node_refs)
        self.gpu_area += self.busy_gpus * (t - t0)
        self.node_area += busy_nodes * (t - t0)
        self.queue_area += self.queue * (t - t0)
        self.bins.spread(self.gpu_bins, t0, t, self.busy_gpus)
        self.bins.spread(self.node_bins, t0, t, busy_nodes)
        self.bins.spread(self.queue_bins, t0, t, self.queue)
        self.now = t

    def tenant(self, name: str, fair_share: float) -> TenantUse:
        use = self.tenants.get(name)
        if use is None:
            use = self.tenants[name] = TenantUse(fair_share=fair_share, since=self.start)
        return use

    def hold(self, tenant: TenantUse, nodes: list[str], gpus: float, t: float, sign: int) -> None:
        """Work taking (+1) or giving back (-1) ``gpus`` in all on ``nodes``."""
        self.advance(t)
        if not self.measure:
            return
        self.busy_gpus += sign * gpus
        for n in nodes:
            self.node_refs[n] += sign
            if self.node_refs[n] <= 0:
                del self.node_refs[n]
        self._tenant_to(tenant, t)
        tenant.gpus += sign * gpus

    def _tenant_to(self, use: TenantUse, t: float) -> None:
        self.bins.spread(use.bins, use.since, t, use.gpus)
        use.gpu_seconds += use.gpus * (t - use.since)
        use.since = t

    def below(self, use: TenantUse, since: float | None, t: float) -> None:
        """A tenant's below-fair-share mark moved to ``since`` (None: it recovered) at ``t``."""
        if use.below_since is not None and since is None:
            span = t - use.below_since
            use.below_s += span
            use.starving_s += max(0.0, span - self.starvation_s)
        use.below_since = since

    def preempted(self, t: float, reasons: list[str]) -> None:
        self.decisions += 1
        self.victims_per[len(reasons)] += 1
        self.preemptions.update(reasons)
        self.bins.count(self.preempt_bins, t)

    def close(self, t: float) -> None:
        """The end of the replay: integrate up to ``t`` and close open intervals."""
        self.advance(t)
        for use in self.tenants.values():
            self._tenant_to(use, t)
            if use.below_since is not None:
                self.below(use, None, t)
