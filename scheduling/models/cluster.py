"""Resource groups (with their preemption policy), vClusters and session types."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q

from scheduling.engine import InvalidDocument, parse_policy


def validate_policy(value: Any) -> None:
    try:
        parse_policy(value)
    except InvalidDocument as exc:
        raise ValidationError({path or "policy": msg for path, msg in exc.errors}) from None


WEIGHT_KEYS = tuple(f"w{i}" for i in range(1, 10))


def validate_weights(value: Any) -> None:
    if not isinstance(value, dict):
        raise ValidationError("must be an object of weights w1..w9")
    for key, weight in value.items():
        if key not in WEIGHT_KEYS:
            raise ValidationError(f"unknown weight {key!r}: the weights are w1..w9")
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not 0 <= weight <= 1:
            raise ValidationError(f"{key} must be a number from 0 to 1")


class ResourceGroup(models.Model):
    """A disjoint set of nodes; the scope of one scheduler pass and of one policy."""

    name = models.SlugField(max_length=64, unique=True)
    description = models.TextField(blank=True)
    policy = models.JSONField(default=dict, validators=[validate_policy],
                              help_text="Fields of the decision contract, section 6.")
    paused = models.BooleanField(default=False, help_text="Operator circuit breaker: never preempt.")
    shadow = models.BooleanField(default=False, help_text="Decide and record, never execute.")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def policy_kind(self) -> str:
        return str(self.policy.get("kind", ""))


class VClusterType(models.TextChoices):
    HPC_BATCH = "hpc_batch", "HPC batch"
    ML_TRAINING = "ml_training", "ML training"
    SERVICE = "service", "Service"
    SENSITIVE = "sensitive", "Sensitive"
    INTERACTIVE = "interactive", "Interactive"


# Queue-ordering weights by vCluster type (the Lattice scheduling weights w1..w9 of the score's
# terms f1..f9, scheduling/engine/score.py; ML training weighs checkpoint efficiency, w8, at
# 0.15). Conformance (w9) weighs nothing unless a vCluster sets it.
DEFAULT_WEIGHTS: dict[str, dict[str, float]] = {
    "hpc_batch": {"w1": 0.25, "w2": 0.20, "w3": 0.15, "w4": 0.10, "w5": 0.10, "w6": 0.10, "w7": 0.05, "w8": 0.05, "w9": 0.00},
    "ml_training": {"w1": 0.20, "w2": 0.15, "w3": 0.15, "w4": 0.10, "w5": 0.10, "w6": 0.10, "w7": 0.05, "w8": 0.15, "w9": 0.00},
    "service": {"w1": 0.30, "w2": 0.25, "w3": 0.10, "w4": 0.10, "w5": 0.10, "w6": 0.10, "w7": 0.05, "w8": 0.00, "w9": 0.00},
    "sensitive": {"w1": 0.40, "w2": 0.20, "w3": 0.10, "w4": 0.10, "w5": 0.10, "w6": 0.10, "w7": 0.00, "w8": 0.00, "w9": 0.00},
    "interactive": {"w1": 0.35, "w2": 0.25, "w3": 0.10, "w4": 0.10, "w5": 0.10, "w6": 0.05, "w7": 0.05, "w8": 0.00, "w9": 0.00},
}


class VCluster(models.Model):
    resource_group = models.ForeignKey(ResourceGroup, on_delete=models.PROTECT, related_name="vclusters")
    name = models.SlugField(max_length=64)
    type = models.CharField(max_length=16, choices=VClusterType.choices, default=VClusterType.HPC_BATCH)
    allow_lending = models.BooleanField(default=True)
    allow_borrowing = models.BooleanField(default=True)
    max_borrow_pct = models.FloatField(default=0.2, validators=[MinValueValidator(0), MaxValueValidator(1)],
                                       help_text="Share of its nodes it lends at most (0..1).")
    allow_aggressive_preemption = models.BooleanField(
        default=True, help_text="fair_share: its work in the aggressive-only band may be taken by an "
                                "aggressively starving tenant.")
    weights = models.JSONField(default=dict, blank=True, validators=[validate_weights],
                               help_text='Queue-ordering weights w1..w9 (0..1), e.g. {"w8": 0.2}; '
                                         'a weight not given keeps its type default.')
    tenants = models.ManyToManyField("scheduling.Tenant", blank=True, related_name="vclusters",
                                     help_text="Tenants that may submit here; none = every tenant.")

    class Meta:
        ordering = ["resource_group__name", "name"]
        constraints = [
            models.UniqueConstraint(fields=["resource_group", "name"], name="vcluster_unique_name"),
            models.CheckConstraint(condition=Q(max_borrow_pct__gte=0) & Q(max_borrow_pct__lte=1),
                                   name="vcluster_borrow_pct_range"),
            models.CheckConstraint(condition=Q(type__in=VClusterType.values), name="vcluster_type_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.resource_group.name}/{self.name}"

    def effective_weights(self) -> dict[str, float]:
        return {**DEFAULT_WEIGHTS[self.type], **(self.weights or {})}


class Scope(models.TextChoices):
    LOWER = "lower", "Lower rank only"
    LOWER_OR_EQUAL = "lower_or_equal", "Lower or equal rank"


class Criteria(models.TextChoices):
    MOST_OVER_ALLOCATED = "most_over_allocated", "Most over-allocated tenant first"
    MOST_RECENT_TASK = "most_recent_task", "Most recent task first"


class SessionType(models.Model):
    """A queue-like class of work (LSF queues, Symphony session types)."""

    resource_group = models.ForeignKey(ResourceGroup, on_delete=models.PROTECT, related_name="session_types")
    name = models.SlugField(max_length=64)
    priority = models.PositiveIntegerField(default=0)
    preemptive = models.BooleanField(default=False)
    preemptable = models.BooleanField(default=False)
    preempts = models.JSONField(default=list, blank=True,
                                help_text='Queues it preempts: ["q"] or [{"queue": "q", "pref": 2}].')
    rank = models.PositiveIntegerField(default=1, validators=[MinValueValidator(1), MaxValueValidator(10000)])
    scope = models.CharField(max_length=16, choices=Scope.choices, default=Scope.LOWER_OR_EQUAL)
    criteria = models.CharField(max_length=24, choices=Criteria.choices, default=Criteria.MOST_OVER_ALLOCATED)
    default_class = models.PositiveSmallIntegerField(default=0, validators=[MaxValueValidator(10)])
    mode = models.CharField(max_length=16, blank=True, default="",
                            choices=[("suspend", "suspend"), ("requeue", "requeue"), ("terminate", "terminate")],
                            help_text="Overrides the policy mode for this type's victims.")
    max_preemptions_per_job = models.PositiveIntegerField(
        null=True, blank=True, help_text="Overrides the policy's max_preemptions_per_job for this type's work.")
    rank_min = models.PositiveIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1), MaxValueValidator(10000)],
        help_text="Lowest rank a request of this type may ask for; blank: the type's rank.")
    rank_max = models.PositiveIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1), MaxValueValidator(10000)],
        help_text="Highest rank a request of this type may ask for; blank: the type's rank.")
    # Job types that shield work from preemption; its submissions carry them (a tenant may set them
    # otherwise only with its quota's allowance).
    non_preemptible = models.BooleanField(default=False, help_text="Its work is never a victim (preemptible: false).")
    exclusive = models.BooleanField(default=False, help_text="Its work is an exclusive job.")
    forced = models.BooleanField(default=False, help_text="Its work is a forced job.")
    backfill = models.BooleanField(default=False, help_text="Its work is a backfill job.")

    class Meta:
        ordering = ["resource_group__name", "-rank", "name"]
        constraints = [
            models.UniqueConstraint(fields=["resource_group", "name"], name="sessiontype_unique_name"),
            models.CheckConstraint(condition=Q(rank__gte=1) & Q(rank__lte=10000), name="sessiontype_rank_range"),
            models.CheckConstraint(condition=Q(default_class__lte=10), name="sessiontype_default_class_range"),
        ]

    def __str__(self) -> str:
        return f"{self.resource_group.name}/{self.name}"

    def rank_range(self) -> tuple[int, int]:
        """The ranks a request of this type may carry (Symphony: set at session creation)."""
        return (self.rank if self.rank_min is None else self.rank_min,
                self.rank if self.rank_max is None else self.rank_max)

    def clean(self) -> None:
        low, high = self.rank_range()
        if self.rank is not None and not low <= self.rank <= high:
            field = "rank_min" if low > self.rank else "rank_max"
            raise ValidationError({field: f"the range {low}..{high} must include the type's rank {self.rank}"})
        entries = self.preempts if isinstance(self.preempts, list) else None
        if entries is None:
            raise ValidationError({"preempts": "must be a list"})
        for entry in entries:
            ok = isinstance(entry, str) or (
                isinstance(entry, dict) and set(entry) <= {"queue", "pref"} and isinstance(entry.get("queue"), str)
                and isinstance(entry.get("pref", 0), int)
            )
            if not ok:
                raise ValidationError({"preempts": f"bad entry {entry!r}"})
        self._preempts_known([entry if isinstance(entry, str) else entry["queue"] for entry in entries])

    def _preempts_known(self, queues: list[str]) -> None:
        """Each queue named is a session type of this group: the pass reads the names as they are,
        and a misspelt one would silently preempt nothing (the engine's parser refuses it too)."""
        if not queues or self.resource_group_id is None:
            return
        known = set(SessionType.objects.filter(resource_group_id=self.resource_group_id)
                    .values_list("name", flat=True)) | {self.name}
        unknown = sorted(set(queues) - known)
        if unknown:
            raise ValidationError({"preempts": f"unknown session type {unknown[0]!r} in this resource group "
                                               f"(known: {', '.join(sorted(known))})"})
