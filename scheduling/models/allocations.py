"""Allocations (the decision contract's fields plus how to run them), placements, events."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import Q

from scheduling.states import CANCELLING, Leaving, State

RESOURCES = ("gpu", "cpu", "memory")


class Checkpoint(models.TextChoices):
    AUTO = "auto", "Automatic"
    MANUAL = "manual", "Application-managed"
    NONE = "none", "None"


class RequeuePolicy(models.TextChoices):
    NEVER = "never", "Never"
    ON_NODE_FAILURE = "on_node_failure", "On node failure"
    ALWAYS = "always", "Always"


class HeldBy(models.TextChoices):
    NONE = "", "Not held"
    USER = "user", "Its tenant"
    OPERATOR = "operator", "An operator"


class DependencyType(models.TextChoices):
    AFTEROK = "afterok", "After it completes"
    AFTERANY = "afterany", "After it ends, however"
    AFTERNOTOK = "afternotok", "After it fails or is cancelled"


class DependencyStatus(models.TextChoices):
    NONE = "", "None, or met"
    WAITING = "waiting", "Waiting for its dependencies"
    NEVER = "never", "Can never be met"


class JobArray(models.Model):
    """Tasks submitted together from one request (``array: "0-99%10"``), each an allocation with
    its index; at most ``throttle`` of them run at once (the pass enforces it)."""

    tenant = models.ForeignKey("scheduling.Tenant", on_delete=models.PROTECT, related_name="arrays")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="arrays")
    resource_group = models.ForeignKey("scheduling.ResourceGroup", on_delete=models.PROTECT, related_name="arrays")
    spec = models.CharField(max_length=255, help_text='As submitted, e.g. "0-99%10" or "1,3,5-7".')
    throttle = models.PositiveIntegerField(null=True, blank=True, help_text="At most this many running at once.")
    size = models.PositiveIntegerField()
    submitted_at = models.DateTimeField()

    class Meta:
        ordering = ["-id"]
        constraints = [models.CheckConstraint(condition=Q(throttle__isnull=True) | Q(throttle__gte=1),
                                              name="array_throttle_positive")]

    def __str__(self) -> str:
        return f"array {self.pk} [{self.spec}]"


class Allocation(models.Model):
    resource_group = models.ForeignKey("scheduling.ResourceGroup", on_delete=models.PROTECT,
                                       related_name="allocations")
    tenant = models.ForeignKey("scheduling.Tenant", on_delete=models.PROTECT, related_name="allocations")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="allocations")
    vcluster = models.ForeignKey("scheduling.VCluster", on_delete=models.PROTECT, null=True, blank=True,
                                 related_name="allocations")
    session_type = models.ForeignKey("scheduling.SessionType", on_delete=models.PROTECT, null=True,
                                     blank=True, related_name="allocations")
    name = models.CharField(max_length=128, blank=True)

    # -- the decision contract's fields
    preemption_class = models.PositiveSmallIntegerField(default=0)
    priority = models.PositiveSmallIntegerField(default=10)
    checkpoint = models.CharField(max_length=8, choices=Checkpoint.choices, default=Checkpoint.NONE)
    checkpoint_minutes = models.FloatField(default=5)
    last_checkpoint_at = models.DateTimeField(null=True, blank=True)
    submitted_at = models.DateTimeField(db_index=True)
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    walltime_minutes = models.FloatField(null=True, blank=True)
    sensitive = models.BooleanField(default=False)
    preemptible = models.BooleanField(default=True)
    exclusive = models.BooleanField(default=False)
    forced = models.BooleanField(default=False)
    backfill = models.BooleanField(default=False)
    protected_until = models.DateTimeField(null=True, blank=True)
    preempted_count = models.PositiveIntegerField(default=0)
    run = models.PositiveIntegerField(
        default=0, help_text="Its starts so far: the run now (or last) under way. Start frames carry it and agents "
                             "name it in their reports, so a late report of an earlier run changes nothing.")
    node_count = models.PositiveIntegerField(default=1)
    per_node_gpu = models.PositiveIntegerField(default=0)
    per_node_cpu = models.PositiveIntegerField(default=0)
    per_node_memory = models.PositiveIntegerField(default=0, help_text="GiB")
    constraints = models.JSONField(default=dict, blank=True,
                                   help_text='{"labels": {"k": "v"}, "same": "switch"}')
    value = models.FloatField(null=True, blank=True)
    preemptive = models.BooleanField(default=True)
    rank = models.PositiveIntegerField(null=True, blank=True,
                                       help_text="Its own preemption rank (rank kind); blank: its session type's.")

    # -- how it runs
    command = models.JSONField(default=list, blank=True)
    env = models.JSONField(default=dict, blank=True)
    requeue_policy = models.CharField(max_length=16, choices=RequeuePolicy.choices,
                                      default=RequeuePolicy.ON_NODE_FAILURE)
    max_requeue = models.PositiveIntegerField(default=3)
    requeue_count = models.PositiveIntegerField(default=0)
    resume_from_checkpoint = models.BooleanField(default=False)
    checkpoint_location = models.CharField(max_length=512, blank=True)
    exit_code = models.IntegerField(null=True, blank=True)

    # -- lifecycle
    state = models.CharField(max_length=16, choices=State.choices, default=State.PENDING, db_index=True)
    state_changed_at = models.DateTimeField(null=True, blank=True)
    deadline_at = models.DateTimeField(null=True, blank=True,
                                       help_text="Checkpoint or grace deadline of a leaving victim.")
    deadline_extended = models.BooleanField(default=False)
    deferred_seconds = models.PositiveIntegerField(default=0)
    checkpoint_progress_at = models.DateTimeField(null=True, blank=True,
                                                  help_text="Last checkpoint_progress: the application is responsive.")
    checkpoint_started_at = models.DateTimeField(null=True, blank=True)
    fail_reason = models.CharField(
        max_length=255, blank=True, default="",
        help_text="Set while it is stopped for a failure (its checkpoint timed out or failed, one of its nodes was "
                  "lost): it keeps its nodes until its exit or the kill after the grace, then ends failed with this.")
    preempted_by = models.ForeignKey("scheduling.PreemptionDecision", on_delete=models.SET_NULL, null=True,
                                     blank=True, related_name="+", help_text="The decision it is leaving for.")
    requeued_from = models.ForeignKey("self", on_delete=models.SET_NULL, null=True, blank=True,
                                      related_name="requeues")
    ran_on = models.JSONField(default=list, blank=True,
                              help_text="Nodes of its latest placement; their agents may still report its exit.")
    leaving = models.CharField(
        max_length=24, choices=Leaving.choices, default=Leaving.NONE, blank=True,
        help_text="Why it is leaving its nodes (preempted, a requeue or cancel asked, a failure): it keeps them "
                  "until its process is gone (its exit, or the kill after the grace), then ends by this.")

    # -- batch verbs: holds, dependencies, arrays (the pass considers none of what is held or waits)
    held = models.BooleanField(default=False, help_text="Held: never started, never a preemptor, until released.")
    held_by = models.CharField(max_length=8, choices=HeldBy.choices, default=HeldBy.NONE, blank=True,
                               help_text="Who held it: its tenant may release only its own holds.")
    depends_on = models.JSONField(default=list, blank=True,
                                  help_text='[{"type": "afterok|afterany|afternotok", "job": ID}], same tenant.')
    dependency = models.CharField(max_length=8, choices=DependencyStatus.choices, default=DependencyStatus.NONE,
                                  blank=True, help_text="Whether its dependencies are still to be met.")
    kill_on_invalid_dep = models.BooleanField(
        default=True, help_text="Cancel it when a dependency can never be met (else it stays pending).")
    array = models.ForeignKey(JobArray, on_delete=models.CASCADE, null=True, blank=True, related_name="tasks")
    array_index = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["-submitted_at", "-id"]
        indexes = [
            models.Index(fields=["resource_group", "state", "submitted_at"], name="alloc_queue_idx"),
            models.Index(fields=["tenant", "state"], name="alloc_tenant_state_idx"),
        ]
        constraints = [
            models.CheckConstraint(condition=Q(preemption_class__lte=10), name="alloc_class_range"),
            models.CheckConstraint(condition=Q(priority__lte=100), name="alloc_priority_range"),
            models.CheckConstraint(condition=Q(node_count__gte=1), name="alloc_node_count_positive"),
            models.CheckConstraint(condition=Q(checkpoint_minutes__gte=0), name="alloc_checkpoint_minutes_nonneg"),
            models.CheckConstraint(condition=Q(walltime_minutes__isnull=True) | Q(walltime_minutes__gt=0),
                                   name="alloc_walltime_positive"),
            models.CheckConstraint(condition=Q(value__isnull=True) | Q(value__gte=0), name="alloc_value_nonneg"),
            models.CheckConstraint(condition=Q(state__in=State.values), name="alloc_state_valid"),
            models.CheckConstraint(condition=Q(checkpoint__in=Checkpoint.values), name="alloc_checkpoint_valid"),
            models.CheckConstraint(condition=Q(requeue_policy__in=RequeuePolicy.values),
                                   name="alloc_requeue_policy_valid"),
            models.CheckConstraint(condition=Q(held_by__in=HeldBy.values), name="alloc_held_by_valid"),
            models.CheckConstraint(condition=Q(dependency__in=DependencyStatus.values),
                                   name="alloc_dependency_valid"),
            models.CheckConstraint(condition=Q(leaving__in=Leaving.values), name="alloc_leaving_valid"),
        ]

    def __str__(self) -> str:
        return f"#{self.pk} {self.name or ''}".strip()

    @property
    def per_node(self) -> dict[str, float]:
        return {r: float(getattr(self, f"per_node_{r}")) for r in RESOURCES if getattr(self, f"per_node_{r}")}

    @property
    def is_sensitive(self) -> bool:
        return self.sensitive or self.preemption_class == 10

    @property
    def being_cancelled(self) -> bool:
        """A cancel was asked while its process may still run: it ends once that is gone."""
        return self.leaving in CANCELLING

    def contract_constraints(self) -> dict[str, Any]:
        return dict(self.constraints or {})


class PlacementKind(models.TextChoices):
    ASSIGNED = "assigned", "Assigned"
    HELD = "held", "Held while victims leave"


class Placement(models.Model):
    """Resources an allocation holds on one node, or a node held for a waiting preemptor."""

    allocation = models.ForeignKey(Allocation, on_delete=models.CASCADE, related_name="placements")
    node = models.ForeignKey("nodes.Node", on_delete=models.PROTECT, related_name="placements")
    kind = models.CharField(max_length=8, choices=PlacementKind.choices, default=PlacementKind.ASSIGNED)
    gpu = models.PositiveIntegerField(default=0)
    cpu = models.PositiveIntegerField(default=0)
    memory = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["allocation", "node"], name="placement_unique"),
            models.CheckConstraint(condition=Q(kind__in=PlacementKind.values), name="placement_kind_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.allocation_id}@{self.node_id}"

    @property
    def resources(self) -> dict[str, float]:
        return {r: float(getattr(self, r)) for r in RESOURCES if getattr(self, r)}


class PlacementDevice(models.Model):
    """A GPU of a node bound to the placement that holds it. Placements exist only while they are
    live (they are deleted when the work is gone), so the unique (node, index) means no two live
    allocations on a node ever hold the same device, whatever raced to bind it."""

    placement = models.ForeignKey(Placement, on_delete=models.CASCADE, related_name="devices")
    node = models.ForeignKey("nodes.Node", on_delete=models.CASCADE, related_name="+")
    index = models.PositiveIntegerField()
    uuid = models.CharField(max_length=128)

    class Meta:
        ordering = ["placement", "index"]
        constraints = [models.UniqueConstraint(fields=["node", "index"], name="placement_device_unique")]

    def __str__(self) -> str:
        return f"{self.node_id}:{self.index}"


class AllocationEvent(models.Model):
    """One accepted state change (or an audited override), written with the change."""

    allocation = models.ForeignKey(Allocation, on_delete=models.CASCADE, related_name="events")
    from_state = models.CharField(max_length=16, blank=True)
    to_state = models.CharField(max_length=16)
    reason = models.CharField(max_length=255, blank=True)
    decision = models.ForeignKey("scheduling.PreemptionDecision", on_delete=models.SET_NULL, null=True,
                                 blank=True, related_name="events")
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True,
                              related_name="+")
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    # Its default is the database's too: events are also written by SQL of their own (a start's).
    node_freed = models.BooleanField(
        default=False, db_default=False, help_text="It freed one node of work of several whose process there is gone, while the "
                                 "others go on (in the same state): the accounting stops billing that node.")

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["allocation", "created_at"], name="event_alloc_time_idx")]

    def __str__(self) -> str:
        return f"{self.allocation_id}: {self.from_state or '-'} -> {self.to_state}"
