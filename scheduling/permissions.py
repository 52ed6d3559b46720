"""Who may do what, in one place for the API, the pages, the live feed and the metrics.

Operators are staff users: they read everything and change policies, never tenants' work
directly. Tenants' members see their own tenant's work only (scheduling/selectors.py), and
cancel, hold or release the work they submitted (a tenant's admins: any of its work).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from rest_framework.permissions import BasePermission

from scheduling.models.tenancy import Membership, Role

OPERATORS_GROUP = "operators"
# Cancelling is its tenant's members' (the API's 403 and the job page's say so alike).
CANCEL_MEMBERS_ONLY = "only its tenant's members cancel work; operators hold, requeue or force-preempt it, with a reason"
# Among a tenant's members, as Slurm's users and account coordinators: each acts on the work they
# submitted; the tenant's admins on any of its work (the API's 403 and the job page's say so alike).
OWN_WORK_ONLY = ("a member may {verb} only the work they submitted; an admin of its tenant may {verb} any of "
                 "the tenant's work")


def is_operator(user: Any) -> bool:
    """Operators are staff users; they change policies, never tenants' work directly."""
    return bool(user and user.is_authenticated and user.is_active and user.is_staff)


def manages(user: Any, tenant_id: int, submitter_id: int) -> bool:
    """Whether ``user``, a member of tenant ``tenant_id``, may cancel, hold or release work of that
    tenant submitted by ``submitter_id``: their own, or any of a tenant they are an admin of."""
    if submitter_id == user.pk:
        return True
    return Membership.objects.filter(user_id=user.pk, tenant_id=tenant_id, role=Role.ADMIN).exists()


class IsOperator(BasePermission):
    """The API's check: operators only (403 for everyone else)."""

    message = "Only operators may do this."

    def has_permission(self, request: Any, view: Any) -> bool:
        return is_operator(request.user)


def operator_required(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """The pages' check: log in first, then operators only (403 for everyone else)."""

    @login_required
    @wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not is_operator(request.user):
            raise PermissionDenied("operators only")
        return view(request, *args, **kwargs)

    return wrapped
