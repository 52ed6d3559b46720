"""Admission: store a validated request as pending within its tenant's hard quota; cancel."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from scheduling.actions.allocations import allocation_transition
from scheduling.actions.lifecycle import cancel_stopping
from scheduling.actions.quotas import ACTIVE, Usage, check_quota, tenant_usage
from scheduling.actions.release import give_back_borrowed
from scheduling.admission_sql import (
    insert_submitted,
    memberships,
    memberships_of_rows,
    quota_locked,
)
from scheduling.dispatch import event_on_commit
from scheduling.errors import Conflict, DomainError
from scheduling.models import (
    Allocation,
    AllocationEvent,
    JobArray,
    Membership,
    Quota,
    ResourceGroup,
    Tenant,
    priority_policy,
)
from scheduling.pass_asks import event_and_pass_on_commit, request_pass_on_commit
from scheduling.states import FINAL, HOLDING, State


def tenant_for(user: AbstractBaseUser, tenant_name: str | None = None) -> Tenant:
    return membership_for(user, tenant_name).tenant


def membership_for(user: AbstractBaseUser, tenant_name: str | None = None) -> Membership:
    """The user's membership of the tenant it names (or of its only tenant), with the tenant and
    its quota read in the same query (a submission needs all three), or with the user's API token
    when the request was authenticated by one (``ApiToken.user_for``)."""
    rows = getattr(user, "_lattice_membership_rows", None)
    found = memberships(user.pk, tenant_name) if rows is None else memberships_of_rows(rows, tenant_name)
    if not found:
        raise DomainError("you are not a member of that tenant" if tenant_name else "you belong to no tenant",
                          field="tenant")
    if len(found) > 1:
        raise DomainError("you belong to several tenants: name one in 'tenant'", field="tenant")
    return found[0]


def priority_for(tenant: Tenant, user: AbstractBaseUser, requested: int | None,
                 membership: Membership | None = None) -> int:
    """The priority a request gets under its tenant's and its user's priority policies (Backend.AI's
    project and user resource policies): the default when it names none; else the named one, if this
    user may change priority at all and it lies in both ranges. The user's blank values take the
    tenant's. A request outside the policy is refused naming ``priority``. ``membership``: the
    user's in ``tenant`` when the caller has it (its tenant's quota read with it)."""
    if membership is not None and membership.tenant_id == tenant.pk and membership.user_id == user.pk:
        policy = priority_policy(getattr(tenant, "quota", None), membership)
    else:
        policy = priority_policy(Quota.objects.filter(tenant=tenant).first(),
                                 Membership.objects.filter(tenant=tenant, user=user).first())
    default, changeable, low, high = policy
    if requested is None or requested == default:
        return default
    if not changeable:
        raise DomainError(f"you may not change the priority here; leave it out to get {default}", field="priority")
    if not low <= requested <= high:
        raise DomainError(f"{requested} is outside the priority range {low}..{high} you may set", field="priority")
    return requested


def allocation_submit(*, user: AbstractBaseUser, tenant: Tenant, group: ResourceGroup,
                      fields: dict[str, Any]) -> Allocation:
    """Store a validated request as pending, within the tenant's hard quota.

    The quota row is locked (SELECT ... FOR UPDATE) in the transaction that inserts,
    so two racing submissions are serialised: one wins, the other gets a 409.
    """
    nodes = int(fields.get("node_count", 1))
    gpus = nodes * int(fields.get("per_node_gpu", 0))
    with transaction.atomic():
        quota = quota_locked(tenant.pk)
        if quota is None:
            raise Conflict("the tenant has no quota; ask an operator", field="tenant")
        # The row and its first event written as save() would, by one statement written once that
        # also reads the tenant's usage before them (under the quota's lock, so no other
        # submission of the tenant commits meanwhile). Past the quota, the refusal rolls them back.
        alloc = Allocation(resource_group=group, tenant=tenant, user=user, submitted_at=timezone.now(),
                           state=State.PENDING, **fields)
        before = insert_submitted(alloc, AllocationEvent(from_state="", to_state=State.PENDING, reason="submitted",
                                                         actor=user), ACTIVE)
        check_quota(quota, Usage(*before), nodes=nodes, gpus=gpus)
        event_and_pass_on_commit("allocation.submitted", {"allocation": alloc.pk, "state": alloc.state}, tenant.pk,
                                 group.pk)
    return alloc


def within_quota(*, tenant: Tenant, fields: dict[str, Any], tasks: int = 1) -> None:
    """What ``allocation_submit`` (``array_submit`` for ``tasks`` tasks) checks of the hard quota,
    without the lock: a what-if answers as the submission would, a 409 naming the quota where it
    would be refused."""
    quota = Quota.objects.filter(tenant=tenant).first()
    if quota is None:
        raise Conflict("the tenant has no quota; ask an operator", field="tenant")
    nodes = int(fields.get("node_count", 1))
    check_quota(quota, tenant_usage(tenant), nodes=nodes * tasks,
                gpus=nodes * int(fields.get("per_node_gpu", 0)) * tasks, allocations=tasks)


def array_submit(*, user: AbstractBaseUser, tenant: Tenant, group: ResourceGroup, fields: dict[str, Any],
                 spec: str, indices: list[int], throttle: int | None) -> JobArray:
    """Store an array: one pending allocation per index, each with ``LATTICE_ARRAY_ID`` and
    ``LATTICE_ARRAY_INDEX`` in its environment. The hard quota is checked for all the tasks at
    once, in the transaction that inserts them: the whole array is admitted or none of it."""
    nodes = int(fields.get("node_count", 1))
    gpus = nodes * int(fields.get("per_node_gpu", 0))
    count = len(indices)
    now = timezone.now()
    with transaction.atomic():
        quota = Quota.objects.select_for_update().filter(tenant=tenant).first()
        if quota is None:
            raise Conflict("the tenant has no quota; ask an operator", field="tenant")
        check_quota(quota, tenant_usage(tenant), nodes=nodes * count, gpus=gpus * count, allocations=count)
        array = JobArray.objects.create(tenant=tenant, user=user, resource_group=group, spec=spec,
                                        throttle=throttle, size=count, submitted_at=now)
        base_env = dict(fields.get("env") or {})
        tasks = Allocation.objects.bulk_create([
            Allocation(resource_group=group, tenant=tenant, user=user, submitted_at=now, state=State.PENDING,
                       array=array, array_index=i,
                       **{**fields, "env": {**base_env, "LATTICE_ARRAY_ID": str(array.pk),
                                            "LATTICE_ARRAY_INDEX": str(i)}})
            for i in indices])
        AllocationEvent.objects.bulk_create([
            AllocationEvent(allocation=a, from_state="", to_state=State.PENDING, actor=user,
                            reason=f"submitted: task {a.array_index} of array {array.pk}") for a in tasks])
        event_and_pass_on_commit("array.submitted", {"array": array.pk, "allocations": [a.pk for a in tasks]},
                                 tenant.pk, group.pk)
    return array


def allocation_cancel(*, allocation: Allocation, actor: AbstractBaseUser | None,
                      reason: str = "cancelled") -> Allocation:
    """Cancel pending or suspended work at once. Work whose process may still run is stopped by
    its agents first and keeps its nodes until it is gone (``cancel_stopping``)."""
    with transaction.atomic():
        alloc = Allocation.objects.select_for_update().get(pk=allocation.pk)
        if alloc.state in FINAL:
            raise Conflict(f"allocation {alloc.pk} already ended ({alloc.state})")
        if alloc.being_cancelled:
            raise Conflict(f"allocation {alloc.pk} is already being cancelled: it ends once its process is gone")
        if alloc.state in HOLDING:
            cancel_stopping(alloc, actor, reason, timezone.now())
        else:
            allocation_transition(allocation=alloc, to=State.CANCELLED, reason=reason, actor=actor,
                                  fields={"ended_at": timezone.now()})
            held = alloc.placements.filter(kind="held")
            nodes = list(held.values_list("node_id", flat=True))
            held.delete()
            give_back_borrowed(nodes)
            request_pass_on_commit(alloc.resource_group_id)
        event_on_commit("allocation.cancelled", {"allocation": alloc.pk, "state": alloc.state}, alloc.tenant_id)
    return alloc
