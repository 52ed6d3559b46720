"""Plain, frozen input types of the decision engine.

Everything here mirrors the input of the decision function (docs/decisions.md). Times are
seconds since the epoch (floats) so comparisons are cheap and no timezone can
leak in; the parser converts ISO-8601 strings.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Resources = dict[str, float]

KINDS = ("class_cost", "priority", "queue", "rank", "fair_share")
MODES = ("suspend", "requeue", "terminate")
VCLUSTER_TYPES = ("hpc_batch", "ml_training", "service", "sensitive", "interactive")
NODE_STATES = ("unknown", "ready", "degraded", "down", "draining", "drained")
RUNNING_STATES = ("running", "checkpointing", "terminating")
CHECKPOINT_KINDS = ("auto", "manual", "none")
VICTIM_SCOPES = ("user", "tenant", "vcluster", "resource_group")
PREEMPTION_ORDERS = ("newest", "oldest")
PREEMPT_FOR = ("least_loaded", "least_run_time", "mini_job", "optimal_mini_job")
JOB_TYPES = ("exclusive", "forced", "backfill")
SCOPES = ("lower", "lower_or_equal")
CRITERIA = ("most_over_allocated", "most_recent_task")
RECLAIM_RULES = ("any", "lower")

Kind = Literal["class_cost", "priority", "queue", "rank", "fair_share"]


@dataclass(frozen=True, slots=True)
class Policy:
    kind: str
    enabled: bool = True
    paused: bool = False
    mode: str = "suspend"
    max_victims: int | None = None
    near_completion_minutes: float = 5
    min_runtime_minutes: float = 0
    max_preemptions_per_job: int | None = None
    reclaim_rule: str = "any"
    checkpoint_timeout_minutes: float = 10
    max_deferral_minutes: float = 5
    # class_cost: the implicit preemption risk of work on a borrowed node (0..1); its checkpoint
    # term costs (1 - borrowed_risk) of what it would on a home node. 0: no discount.
    borrowed_risk: float = 0.0
    preemptible_priority: int | None = None
    victim_scope: str = "resource_group"
    preemption_order: str = "newest"
    preempt_jobtypes: tuple[str, ...] = ()
    preempt_for: str | None = None
    no_preempt_run_minutes: float | None = None
    no_preempt_finish_minutes: float | None = None
    # queue: a job started or resumed less than this many minutes ago is not preempted (again).
    no_preempt_interval_minutes: float | None = None
    tolerance: float = 0.8
    starvation_timeout_s: float = 30
    aggressive_starvation_timeout_s: float = 120
    enable_aggressive: bool = False
    preemption_threshold: float = 1.0
    aggressive_threshold: float = 0.2
    # At most one preemptive start per group in this window (the pass passes the last one's time).
    preemptive_scheduling_backoff_s: float = 5
    # A tenant whose dominant share is below this is never preempted (0: off).
    non_preemptible_usage_threshold: float = 0.0


@dataclass(frozen=True, slots=True)
class Tenant:
    name: str
    fair_share: float = 0.0
    burst_allowance: float | None = None
    below_fair_share_since: float | None = None


@dataclass(frozen=True, slots=True)
class VCluster:
    name: str
    type: str = "hpc_batch"
    allow_lending: bool = True
    allow_borrowing: bool = True
    max_borrow_pct: float = 0.2
    allow_aggressive_preemption: bool = True


@dataclass(frozen=True, slots=True)
class Preempts:
    queue: str
    pref: int = 0


@dataclass(frozen=True, slots=True)
class SessionType:
    name: str
    priority: int = 0
    preemptive: bool = False
    preemptable: bool = False
    preempts: tuple[Preempts, ...] = ()
    rank: int = 1
    scope: str = "lower_or_equal"
    criteria: str = "most_over_allocated"
    # What happens to this type's work when it is preempted; None: the group policy's mode.
    mode: str | None = None
    # Overrides the policy's max_preemptions_per_job for this type's work (LSF: application > queue).
    max_preemptions_per_job: int | None = None


DEFAULT_SESSION_TYPE = SessionType(name="")


def effective_mode(policy_mode: str | None, session_mode: str | None) -> str:
    """What happens to a victim: its session type's mode when set, else its group's policy mode."""
    return session_mode or policy_mode or "suspend"


def victim_action(mode: str, checkpoint: str) -> str:
    """Checkpoint in suspend mode when the work can; otherwise it is stopped."""
    return "checkpoint" if mode == "suspend" and checkpoint in ("auto", "manual") else "terminate"


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    capacity: Resources
    labels: dict[str, str] = field(default_factory=dict)
    vcluster: str | None = None
    borrowed_by: str | None = None
    state: str = "ready"


@dataclass(frozen=True, slots=True)
class Allocation:
    """A running entry or the pending request (the fields they share)."""

    id: str
    tenant: str | None = None
    user: str | None = None
    vcluster: str | None = None
    session_type: str | None = None
    preemption_class: int = 0
    priority: int = 10
    checkpoint: str = "none"
    checkpoint_minutes: float = 5
    last_checkpoint_at: float | None = None
    submitted_at: float | None = None
    started_at: float | None = None
    walltime_minutes: float | None = None
    sensitive: bool = False
    preemptible: bool = True
    exclusive: bool = False
    forced: bool = False
    backfill: bool = False
    protected_until: float | None = None
    preempted_count: int = 0
    state: str = "running"
    # rank: its own preemption rank within its session type's range; None: the type's rank.
    rank: int | None = None
    placement: dict[str, Resources] = field(default_factory=dict)
    # pending-only fields
    nodes: int = 1
    per_node: Resources = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    same: str | None = None
    value: float | None = None
    preemptive: bool = True
    held_nodes: tuple[str, ...] = ()

    @property
    def is_sensitive(self) -> bool:
        return self.sensitive or self.preemption_class == 10

    @property
    def job_types(self) -> tuple[str, ...]:
        return tuple(
            t
            for t, on in (
                ("exclusive", self.exclusive),
                ("forced", self.forced),
                ("backfill", self.backfill),
            )
            if on
        )


@dataclass(frozen=True, slots=True)
class Scenario:
    """One decision input: a resource group snapshot, a policy and a request."""

    now: float
    policy: Policy
    nodes: tuple[Node, ...]
    running: tuple[Allocation, ...]
    pending: Allocation
    tenants: tuple[Tenant, ...] = ()
    vclusters: tuple[VCluster, ...] = ()
    session_types: tuple[SessionType, ...] = ()
    has_vclusters: bool = False
    has_session_types: bool = False
    last_preemption_at: float | None = None
