"""Tenants, their members and their quotas."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from .secrets import HashedToken


class Tenant(models.Model):
    name = models.SlugField(max_length=64, unique=True)
    display_name = models.CharField(max_length=128, blank=True)
    below_fair_share_since = models.DateTimeField(null=True, blank=True,
                                                  help_text="Set by the scheduler; drives fair-share starvation.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Role(models.TextChoices):
    ADMIN = "admin", "Admin"
    MEMBER = "member", "Member"


class Membership(models.Model):
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=8, choices=Role.choices, default=Role.MEMBER)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "tenant"], name="membership_unique"),
            models.CheckConstraint(condition=Q(role__in=Role.values), name="membership_role_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.tenant} ({self.role})"


class Quota(models.Model):
    """Hard limits are enforced at admission and placement; soft targets only order the queue."""

    tenant = models.OneToOneField(Tenant, on_delete=models.CASCADE, related_name="quota")
    max_nodes = models.PositiveIntegerField(default=16)
    max_gpus = models.PositiveIntegerField(default=64)
    max_concurrent_allocations = models.PositiveIntegerField(default=50)
    max_preemption_class = models.PositiveSmallIntegerField(default=9)
    max_priority = models.PositiveSmallIntegerField(default=100)
    fair_share = models.FloatField(default=0.0)
    burst_allowance = models.FloatField(null=True, blank=True)
    gpu_hours_budget = models.FloatField(null=True, blank=True)

    class Meta:
        constraints = [
            models.CheckConstraint(condition=Q(max_preemption_class__lte=10), name="quota_max_class_range"),
            models.CheckConstraint(condition=Q(max_priority__lte=100), name="quota_max_priority_range"),
            models.CheckConstraint(condition=Q(fair_share__gte=0) & Q(fair_share__lte=1), name="quota_fair_share_range"),
            models.CheckConstraint(condition=Q(burst_allowance__isnull=True) | Q(burst_allowance__gte=0),
                                   name="quota_burst_nonnegative"),
            models.CheckConstraint(condition=Q(gpu_hours_budget__isnull=True) | Q(gpu_hours_budget__gte=0),
                                   name="quota_budget_nonnegative"),
        ]

    def __str__(self) -> str:
        return f"quota of {self.tenant}"


class ApiToken(HashedToken):
    """A client's API token: shown once, stored as a SHA-256 digest, compared in constant time."""

    KIND = "lpi"
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")

    class Meta(HashedToken.Meta):
        pass

    def __str__(self) -> str:
        return f"{self.prefix}… of {self.user}"
