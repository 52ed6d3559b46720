"""The stored usage series (scheduling/usage.py writes them, scheduling/usage_series.py reads them)."""

from __future__ import annotations

from django.db import models
from django.db.models import Q


class UsageScope(models.TextChoices):
    GROUP = "g", "Resource group"
    VCLUSTER = "v", "vCluster"
    TENANT = "t", "Tenant in a resource group"


class UsageSample(models.Model):
    """What one resource group, vCluster or tenant (within a group) used during one bucket.

    Gauges are averages over the bucket (GPU-seconds / bucket seconds, so a sample computed late
    from the history equals one taken on time); counters are totals within it. Buckets are a
    minute, folded into 15 minutes after 2 days and into a day after 60 days, dropped after a
    year. A vCluster or tenant with nothing in a bucket has no row (zero).
    """

    resolution = models.PositiveIntegerField(help_text="Bucket length in seconds: 60, 900 or 86400.")
    start = models.DateTimeField()
    scope = models.CharField(max_length=1, choices=UsageScope.choices)
    scope_id = models.BigIntegerField(help_text="The group's, vCluster's or tenant's id.")
    resource_group_id = models.BigIntegerField()
    gpu_used = models.FloatField(default=0.0)
    cpu_used = models.FloatField(default=0.0)
    memory_used = models.FloatField(default=0.0)
    gpu_held = models.FloatField(default=0.0, help_text="Held for preemptors while their victims leave.")
    gpu_borrowed = models.FloatField(default=0.0, help_text="In use on nodes lent by another vCluster.")
    gpu_free = models.FloatField(default=0.0)
    pending = models.FloatField(default=0.0, help_text="Pending allocations (average count).")
    pending_gpus = models.FloatField(default=0.0, help_text="GPUs the pending allocations ask for.")
    preemptions = models.JSONField(default=dict, blank=True, help_text="Victims by reason.")
    gpu_hours_lost = models.FloatField(default=0.0, help_text="Work since the last start of terminated victims.")
    checkpoint_seconds = models.FloatField(default=0.0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["resolution", "scope", "scope_id", "resource_group_id", "start"],
                                    name="usage_sample_unique"),
            models.CheckConstraint(condition=Q(resolution__in=[60, 900, 86400]), name="usage_resolution_valid"),
        ]
        indexes = [
            models.Index(fields=["resource_group_id", "scope", "start"], name="usage_group_scope_idx"),
            models.Index(fields=["resolution", "start"], name="usage_resolution_start_idx"),
            # A chart's read: one scope's rows over a range, whatever the number of scopes stored.
            models.Index(fields=["scope", "scope_id", "start"], name="usage_scope_start_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.scope}{self.scope_id}@{self.start:%Y-%m-%d %H:%M} ({self.resolution}s)"
