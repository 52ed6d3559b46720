"""Append-only records: every preemption decision and every policy change."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from .fields import RecordJSONField


class Execution(models.TextChoices):
    EXECUTED = "executed", "Executed"
    SHADOW = "shadow", "Shadow (recorded only)"
    ABORTED = "aborted", "Aborted"
    RECORDED = "recorded", "Recorded (nothing to execute)"


class PreemptionDecision(models.Model):
    """What the engine decided for one request, with every candidate and why."""

    resource_group = models.ForeignKey("scheduling.ResourceGroup", on_delete=models.PROTECT,
                                       related_name="decisions")
    preemptor = models.ForeignKey("scheduling.Allocation", on_delete=models.SET_NULL, null=True,
                                  blank=True, related_name="decisions")
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    decided_for = models.DateTimeField(help_text="The 'now' the engine was given.")
    result = models.CharField(max_length=8, help_text="fits, preempt or wait")
    code = models.CharField(max_length=32)
    trigger = models.CharField(max_length=16, blank=True)
    nodes = RecordJSONField(default=list)
    borrowed = RecordJSONField(default=list)
    victims = RecordJSONField(default=list)
    candidates = RecordJSONField(default=list)
    explanation = models.TextField()
    policy_snapshot = RecordJSONField(default=dict)
    outcome = models.CharField(max_length=10, choices=Execution.choices, default=Execution.RECORDED)
    latency_ms = models.FloatField(null=True, blank=True)
    victim_allocations = models.ManyToManyField("scheduling.Allocation", blank=True, related_name="preempted_in")
    released_at = models.DateTimeField(null=True, blank=True,
                                       help_text="When every victim had released (the preemptor could start).")
    queue_score = RecordJSONField(null=True, blank=True,
                                  help_text="A waiting request's queue score and its terms (class_cost groups).")

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["resource_group", "-id"], name="decision_rg_id_idx"),
            models.Index(fields=["preemptor", "-created_at"], name="decision_preemptor_idx"),
        ]

    def __str__(self) -> str:
        return f"decision {self.pk}: {self.result} {self.code}"


class DecisionAudience(models.Model):
    """A tenant that may read a decision: its preemptor's tenant and every victim's.

    The index behind a tenant's decision list: (tenant, decision) walked newest
    first, so a page costs the same with a thousand records or a million.
    """

    tenant = models.ForeignKey("scheduling.Tenant", on_delete=models.CASCADE, related_name="+")
    decision = models.ForeignKey(PreemptionDecision, on_delete=models.CASCADE, related_name="audience")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "decision"], name="decision_audience_unique")]

    def __str__(self) -> str:
        return f"tenant {self.tenant_id} reads decision {self.decision_id}"


# The longest reason a person may give for a change (pages, REST): kept whole in the audit log.
REASON_MAX_LENGTH = 2000


class PolicyChange(models.Model):
    """Every operator edit or override: who, when, before, after, why. Append-only."""

    actor = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True,
                              related_name="policy_changes")
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    action = models.CharField(max_length=32, help_text="create, edit, delete, protect, force_preempt, pause, resume, drain, undrain")
    target_type = models.CharField(max_length=64)
    target_id = models.CharField(max_length=64)
    target_repr = models.CharField(max_length=255)
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)
    reason = models.TextField(blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["target_type", "target_id"], name="policychange_target_idx"),
                   models.Index(fields=["action", "-id"], name="policychange_action_idx")]

    def __str__(self) -> str:
        return f"{self.action} {self.target_type} {self.target_repr}"

    def save(self, *args: object, **kwargs: object) -> None:
        if self.pk is not None:
            raise ValueError("policy changes are append-only")
        super().save(*args, **kwargs)  # type: ignore[arg-type]


class MetricRollup(models.Model):
    """Counters folded from the append-only records (see scheduling/metrics.py), so a scrape reads
    only what is new instead of every decision ever made. Keys ``mark:*`` hold the last folded id."""

    key = models.CharField(max_length=255, unique=True)
    value = models.FloatField(default=0.0)

    def __str__(self) -> str:
        return f"{self.key} = {self.value}"


class SnapshotChange(models.Model):
    """A committed change to what a scheduler snapshot holds, written by database triggers on
    PostgreSQL (migration 0005): which group (null: every group), which transaction, and the
    writer tag the transaction set (a pass tags its own writes). A pass keeps its snapshot while
    no change it did not make is invisible to the database snapshot it was loaded from."""

    group_id = models.BigIntegerField(null=True)
    xid = models.BigIntegerField()
    writer = models.CharField(max_length=64, blank=True)
    created_at = models.DateTimeField()
    # The allocations whose rows or placements changed; null when something else changed (nodes,
    # vClusters, tenants...), which only a full reload takes in.
    allocations = models.JSONField(null=True, blank=True)

    class Meta:
        # A pass reads the changes since its previous check, of every group (quota use spans them).
        indexes = [models.Index(fields=["xid"], name="snapshotchange_xid_idx"),
                   models.Index(fields=["created_at"], name="snapshotchange_time_idx")]

    def __str__(self) -> str:
        return f"change to group {self.group_id} by transaction {self.xid}"
