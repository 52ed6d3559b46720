"""A recorded history for policy evaluations: allocations that ran in a group, written as the
system writes them (submitted, started, ended), with contention so that policies differ."""

from __future__ import annotations

import random
from datetime import timedelta

from django.utils import timezone

from scheduling.models import Allocation, ResourceGroup, Tenant

# The policy editor's fields for a class_cost policy (the console posts these).
POLICY_FIELDS = {
    "policy_kind": "class_cost", "policy_enabled": "on", "policy_mode": "suspend", "policy_max_victims": "3",
    "policy_near_completion_minutes": "5", "policy_min_runtime_minutes": "0", "policy_reclaim_rule": "any",
    "policy_checkpoint_timeout_minutes": "10", "policy_max_deferral_minutes": "5",
    "policy_victim_scope": "resource_group", "policy_preemption_order": "newest", "policy_tolerance": "0.8",
    "policy_starvation_timeout_s": "30", "policy_aggressive_starvation_timeout_s": "120",
    "policy_preemption_threshold": "1.0", "policy_aggressive_threshold": "0.2",
    "policy_preemptive_scheduling_backoff_s": "5", "policy_non_preemptible_usage_threshold": "0"}


def record_history(group: ResourceGroup, tenants: list[Tenant], jobs: int, *, seed: int = 7,
                   hours: float = 24.0) -> list[Allocation]:
    """``jobs`` finished allocations submitted over the last ``hours`` (ending an hour ago): 4 or 8
    GPUs, classes 0 to 3, checkpointing half the time, runs of 5 to 90 minutes; more work than the
    group's nodes can run at once, so that work waits and higher classes preempt."""
    rng = random.Random(seed)
    end = timezone.now().replace(microsecond=0) - timedelta(hours=1)
    begin = end - timedelta(hours=hours)
    rows = []
    for i in range(jobs):
        submitted = begin + timedelta(seconds=rng.uniform(0, hours * 3600))
        started = submitted + timedelta(seconds=rng.choice([0, 0, 30, 600]))
        tenant = tenants[i % len(tenants)]
        rows.append(Allocation(
            resource_group=group, tenant=tenant, user=tenant.memberships.first().user, submitted_at=submitted,
            started_at=started, ended_at=started + timedelta(minutes=rng.uniform(5, 90)), state="completed",
            node_count=1, per_node_gpu=rng.choice([4, 8]), preemption_class=rng.randrange(4),
            priority=rng.choice([10, 20]), checkpoint=rng.choice(["none", "auto"]), walltime_minutes=120))
    return Allocation.objects.bulk_create(rows)
