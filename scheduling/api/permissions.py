from __future__ import annotations

from typing import Any

from rest_framework.permissions import BasePermission

OPERATORS_GROUP = "operators"


def is_operator(user: Any) -> bool:
    """Operators are staff users; they change policies, never tenants' work directly."""
    return bool(user and user.is_authenticated and user.is_active and user.is_staff)


class IsOperator(BasePermission):
    message = "Only operators may do this."

    def has_permission(self, request: Any, view: Any) -> bool:
        return is_operator(request.user)
