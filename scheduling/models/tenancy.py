"""Tenants, their members and their quotas."""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import connection, models
from django.db.models import Q

from .rows import fetch, load, quote, select_list, table, width
from .secrets import PREFIX_LEN, HashedToken

# A portable Unix user or group name (POSIX's portable filename characters, not starting with "-").
UNIX_NAME = RegexValidator(r"^[a-z_][a-z0-9_.-]*\$?$", "a Unix name: lower-case letters, digits, _ . -")


def root_without_leave(mapping: Any, allow_root: bool) -> None:
    """A mapping to the user or group named root is refused up front unless the tenant may run as
    root (an agent refuses any uid or gid 0 without that leave; other names for 0 only it knows)."""
    for field in ("unix_user", "unix_group"):
        if getattr(mapping, field) == "root" and not allow_root:
            raise ValidationError({field: "root needs the tenant's allow_root (an operator's leave, audited)"})


class Tenant(models.Model):
    name = models.SlugField(max_length=64, unique=True)
    display_name = models.CharField(max_length=128, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # Who the tenant's work runs as on the nodes (blank: none; the agent refuses such work unless
    # its node's operator lets it run as the agent, nodes/runas.py).
    unix_user = models.CharField(max_length=32, blank=True, validators=[UNIX_NAME],
                                 help_text="Unix user the tenant's work runs as on the nodes; blank: none (the agent "
                                           "runs it only where its node allows unmapped work).")
    unix_group = models.CharField(max_length=32, blank=True, validators=[UNIX_NAME],
                                  help_text="Unix group; blank: the user's primary group.")
    allow_root = models.BooleanField(default=False, help_text="May the tenant's work run as root (uid 0).")

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        root_without_leave(self, self.allow_root)
        if not self.allow_root and self.pk is not None:
            # Taking the leave back while a member's own mapping is root: said here too, not
            # learnt from that member's refused jobs.
            members = sorted(Membership.objects.filter(tenant_id=self.pk)
                             .filter(Q(unix_user="root") | Q(unix_group="root"))
                             .values_list("user__username", flat=True))
            if members:
                raise ValidationError({"allow_root": f"members map to root ({', '.join(members)}): map them to "
                                                     "another user or group first"})


class Role(models.TextChoices):
    ADMIN = "admin", "Admin"
    MEMBER = "member", "Member"


class Membership(models.Model):
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=8, choices=Role.choices, default=Role.MEMBER)
    # This user's priority policy in this tenant; blank values take the tenant's (its Quota).
    default_priority = models.PositiveSmallIntegerField(null=True, blank=True, validators=[MaxValueValidator(100)],
                                                        help_text="Blank: the tenant's default priority.")
    priority_changeable = models.BooleanField(default=True, help_text="May this user set a priority at all.")
    min_priority = models.PositiveSmallIntegerField(null=True, blank=True, validators=[MaxValueValidator(100)],
                                                    help_text="Blank: the tenant's minimum.")
    max_priority = models.PositiveSmallIntegerField(null=True, blank=True, validators=[MaxValueValidator(100)],
                                                    help_text="Blank: the tenant's maximum.")
    # Who this user's work in this tenant runs as on the nodes (blank: the tenant's mapping).
    unix_user = models.CharField(max_length=32, blank=True, validators=[UNIX_NAME],
                                 help_text="Unix user this member's work runs as; blank: the tenant's.")
    unix_group = models.CharField(max_length=32, blank=True, validators=[UNIX_NAME],
                                  help_text="Unix group with that user; blank: the user's primary group.")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "tenant"], name="membership_unique"),
            models.CheckConstraint(condition=Q(role__in=Role.values), name="membership_role_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.tenant} ({self.role})"

    # The quota this member's policy is checked against: the tenant's as stored, unless the caller
    # edits both at once (the console's tenant editor sets the edited one).
    quota_in_effect: Quota | None = None

    def clean(self) -> None:
        if self.tenant_id is not None:
            # The tenant as this edit has it: the admin's tenant page posts its allow_root and its
            # members' mappings at once (stored, elsewhere).
            root_without_leave(self, self.tenant.allow_root)
        if self.min_priority is not None and self.max_priority is not None and self.min_priority > self.max_priority:
            raise ValidationError({"min_priority": f"must not be above max_priority {self.max_priority}"})
        quota = self.quota_in_effect
        if quota is None and self.default_priority is not None and self.tenant_id is not None:
            quota = Quota.objects.filter(tenant_id=self.tenant_id).first()
        problem = default_outside(quota, self)
        if problem is not None:
            raise ValidationError({"default_priority": problem})


class Quota(models.Model):
    """Hard limits are enforced at admission and placement; soft targets only order the queue."""

    tenant = models.OneToOneField(Tenant, on_delete=models.CASCADE, related_name="quota")
    max_nodes = models.PositiveIntegerField(default=16)
    max_gpus = models.PositiveIntegerField(default=64)
    max_concurrent_allocations = models.PositiveIntegerField(default=50)
    max_preemption_class = models.PositiveSmallIntegerField(default=9, validators=[MaxValueValidator(10)])
    max_priority = models.PositiveSmallIntegerField(default=100, validators=[MaxValueValidator(100)])
    # The tenant's priority policy (the project's resource policy): what a request gets when it names
    # no priority, whether its users may name one, and from what range (min_priority..max_priority).
    default_priority = models.PositiveSmallIntegerField(default=10, validators=[MaxValueValidator(100)])
    priority_changeable = models.BooleanField(default=True)
    min_priority = models.PositiveSmallIntegerField(default=0, validators=[MaxValueValidator(100)])
    fair_share = models.FloatField(default=0.0, validators=[MinValueValidator(0), MaxValueValidator(1)])
    burst_allowance = models.FloatField(null=True, blank=True, validators=[MinValueValidator(0)])
    gpu_hours_budget = models.FloatField(null=True, blank=True, validators=[MinValueValidator(0)])
    # An operator's leave to submit work that escapes preemption (else only a session type sets it).
    allow_non_preemptible = models.BooleanField(default=False, help_text="May submit preemptible: false.")
    allow_exclusive = models.BooleanField(default=False, help_text="May submit exclusive jobs.")
    allow_forced = models.BooleanField(default=False, help_text="May submit forced jobs.")
    allow_backfill = models.BooleanField(default=False, help_text="May submit backfill jobs.")
    default_resource_group = models.ForeignKey(
        "scheduling.ResourceGroup", on_delete=models.SET_NULL, null=True, blank=True, related_name="+",
        help_text="Where the tenant's work goes when a submission names no resource_group.")

    class Meta:
        constraints = [
            models.CheckConstraint(condition=Q(max_preemption_class__lte=10), name="quota_max_class_range"),
            models.CheckConstraint(condition=Q(max_priority__lte=100), name="quota_max_priority_range"),
            models.CheckConstraint(condition=Q(default_priority__lte=100) & Q(min_priority__lte=100),
                                   name="quota_priority_policy_range"),
            models.CheckConstraint(condition=Q(fair_share__gte=0) & Q(fair_share__lte=1), name="quota_fair_share_range"),
            models.CheckConstraint(condition=Q(burst_allowance__isnull=True) | Q(burst_allowance__gte=0),
                                   name="quota_burst_nonnegative"),
            models.CheckConstraint(condition=Q(gpu_hours_budget__isnull=True) | Q(gpu_hours_budget__gte=0),
                                   name="quota_budget_nonnegative"),
        ]

    def __str__(self) -> str:
        return f"quota of {self.tenant}"

    def clean(self) -> None:
        if self.min_priority > self.max_priority:
            raise ValidationError({"min_priority": f"must not be above max_priority {self.max_priority}"})
        if not self.min_priority <= self.default_priority <= self.max_priority:
            raise ValidationError({"default_priority": f"must be within {self.min_priority}..{self.max_priority}"})


class PriorityPolicy(NamedTuple):
    """What a user's request gets under its tenant's and its own priority policies (Backend.AI's
    project and user resource policies): ``default`` when it names none; a named one only if
    ``changeable`` and within ``low``..``high`` (empty when ``low > high``)."""

    default: int
    changeable: bool
    low: int
    high: int

    @property
    def empty(self) -> bool:
        return self.low > self.high


def priority_policy(quota: Quota | None, member: Membership | None) -> PriorityPolicy:
    """The tenant's policy (its quota; without one 10, changeable, 0..100) narrowed by the member's:
    its blank values take the tenant's, its range is intersected, both must allow changes. A
    default outside a non-empty range (the tenant's, inherited by a member whose own range excludes
    it, or one stored before the tenant's range narrowed) is brought to the nearest end of it: what
    a request gets when it names no priority is always one it could name."""
    default, changeable, low, high = 10, True, 0, 100
    if quota is not None:
        default, changeable = quota.default_priority, quota.priority_changeable
        low, high = quota.min_priority, quota.max_priority
    if member is not None:
        default = default if member.default_priority is None else member.default_priority
        changeable = changeable and member.priority_changeable
        low = low if member.min_priority is None else max(low, member.min_priority)
        high = high if member.max_priority is None else min(high, member.max_priority)
    if low <= high:
        default = min(max(default, low), high)
    return PriorityPolicy(default, changeable, low, high)


def default_outside(quota: Quota | None, member: Membership) -> str | None:
    """Why the member's own default priority lies outside the range its policy (with ``quota``, the
    tenant's) lets it name, or None. An empty range (the member's own outside the tenant's) is
    allowed on purpose: its member names no priority, and gets the default."""
    if member.default_priority is None:
        return None
    policy = priority_policy(quota, member)
    if policy.empty or policy.low <= member.default_priority <= policy.high:
        return None
    return f"must be within {policy.low}..{policy.high}, the range this member may name (blank: the tenant's default)"


class TenantShare(models.Model):
    """A tenant's standing in one resource group, written by the scheduler pass (passes/fairshare.py):
    its dominant usage share, its fair share then, and since when it has been below
    ``fair_share x tolerance`` (null: not below). Starving is derived from ``below_since`` and the
    group's policy when read."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="shares")
    resource_group = models.ForeignKey("scheduling.ResourceGroup", on_delete=models.CASCADE,
                                       related_name="tenant_shares")
    share = models.FloatField(default=0.0)
    fair_share = models.FloatField(default=0.0)
    below_since = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField()

    class Meta:
        ordering = ["resource_group_id", "tenant__name"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "resource_group"], name="tenantshare_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.tenant} in {self.resource_group_id}: {self.share:.3f}"


@functools.cache
def _token_sql(token_model: type[models.Model], user_model: type[models.Model], vendor: str) -> str:
    """The user's columns by name, not u.*: a prepared statement must keep its result's shape when
    a migration adds a column while the servers run. Each of the user's memberships comes with its
    tenant and the tenant's quota (``membership_row``), as a submission reads them next."""
    q = quote
    user_pk = q(user_model._meta.pk.column)  # type: ignore[union-attr]
    return (f"SELECT {select_list(user_model, 'u')}, t.{q('id')}, t.{q('digest')}, t.{q('created_at')}, "
            f"{select_list(Membership, 'm')}, {select_list(Tenant, 'mt')}, {select_list(Quota, 'mq')} "
            f"FROM {table(token_model)} t JOIN {table(user_model)} u ON u.{user_pk} = t.{q('user_id')} "
            f"LEFT JOIN {table(Membership)} m ON m.{q('user_id')} = u.{user_pk} "
            f"LEFT JOIN {table(Tenant)} mt ON mt.{q('id')} = m.{q('tenant_id')} "
            f"LEFT JOIN {table(Quota)} mq ON mq.{q('tenant_id')} = mt.{q('id')} "
            f"WHERE t.{q('prefix')} = %s AND t.{q('revoked_at')} IS NULL")


@functools.cache
def _membership_tenant_at() -> int:
    return [f.attname for f in Membership._meta.concrete_fields].index("tenant_id")


def membership_row(row: Any) -> Membership:
    """A membership from its columns, its tenant's and its quota's (all None: the tenant has no
    quota) as ``_token_sql`` and ``admission_sql.memberships`` read them: the tenant and the quota
    cached on it as ``select_related`` leaves them."""
    a, b = width(Membership), width(Membership) + width(Tenant)
    membership, tenant = load(Membership, row[:a]), load(Tenant, row[a:b])
    quota = load(Quota, row[b:]) if row[b] is not None else None
    if quota is not None:
        Quota._meta.get_field("tenant").set_cached_value(quota, tenant)
    Tenant._meta.get_field("quota").set_cached_value(tenant, quota)  # type: ignore[attr-defined]
    Membership._meta.get_field("tenant").set_cached_value(membership, tenant)
    return membership


class ApiToken(HashedToken):
    """A client's API token: shown once, stored as a SHA-256 digest, compared in constant time."""

    KIND = "lpi"
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")

    class Meta(HashedToken.Meta):
        pass

    def __str__(self) -> str:
        return f"{self.prefix}… of {self.user}"

    @classmethod
    def user_for(cls, token: str) -> tuple[Any, ApiToken, list[int]] | None:
        """The active user holding unrevoked ``token``, the token record and the user's tenants,
        or None.

        Every API request asks this, so it is one written-out query (the ORM spent more
        time compiling the token-and-user join than the database spent answering it) that
        also brings the tenants, which scoping needs next (``selectors.remember_tenant_ids``).
        """
        User = get_user_model()
        n = width(User)
        found: tuple[Any, ApiToken] | None = None
        rows: list[tuple[Any, ...]] = []
        for row in fetch(_token_sql(cls, User, connection.vendor), [token[:PREFIX_LEN]]):
            token_id, digest, created_at = row[n:n + 3]
            if cls.matches(digest, token):
                if found is None:
                    user = load(User, row[:n])
                    found = user, cls(id=token_id, prefix=token[:PREFIX_LEN], digest=digest, created_at=created_at,
                                      user=user)
                if row[n + 3] is not None:  # a membership (none: the user belongs to no tenant)
                    rows.append(row[n + 3:])
        if found is None or not found[0].is_active:
            return None
        found[0]._lattice_membership_rows = rows  # (admission's membership_for reads them: no query)
        at = _membership_tenant_at()
        return found[0], found[1], [row[at] for row in rows]
