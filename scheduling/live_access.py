"""Who may still hear the live feed: a socket's access is re-checked when it may have changed.

A logout, a membership removed or moved, or a user deactivated or deleted tells that user's sockets
(through the channel layer, so in every process) to re-check at once; see LiveConsumer.live_recheck. The
consumer also re-checks on its own every ``RECHECK_S`` while events flow, for what no signal
announces (a session that expired or was deleted)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from django.conf import settings
from django.contrib import auth
from django.contrib.auth.signals import user_logged_out
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver
from django.utils.module_loading import import_string

from scheduling.dispatch import OPS_GROUP, live_recheck_on_commit, tenant_group
from scheduling.models import Membership
from scheduling.permissions import is_operator

RECHECK_S = 10.0


def groups_for(user: Any) -> list[str]:
    if is_operator(user):
        return [OPS_GROUP]
    return [tenant_group(t) for t in user.memberships.values_list("tenant_id", flat=True)]


def session_user(session_key: str | None) -> Any:
    """The user the session ``session_key`` holds now, read afresh from the session store (anonymous
    once logged out, flushed, expired, deactivated or after a password change)."""
    engine = import_string(f"{settings.SESSION_ENGINE}.SessionStore")
    return auth.get_user(SimpleNamespace(session=engine(session_key)))  # type: ignore[arg-type]


def access(session_key: str | None, user_pk: int) -> list[str] | None:
    """The groups the session may hear now, or None once it no longer holds the user ``user_pk``."""
    user = session_user(session_key)
    if not user.is_authenticated or user.pk != user_pk:
        return None
    return groups_for(user)


@receiver(user_logged_out, dispatch_uid="lattice-live-logout")
def _logged_out(sender: Any, user: Any = None, **kwargs: Any) -> None:
    if user is not None:
        live_recheck_on_commit(user.pk)


@receiver(post_save, sender=Membership, dispatch_uid="lattice-live-membership-saved")
@receiver(post_delete, sender=Membership, dispatch_uid="lattice-live-membership-deleted")
def _membership_changed(sender: Any, instance: Membership, **kwargs: Any) -> None:
    live_recheck_on_commit(instance.user_id)


@receiver(post_save, sender=settings.AUTH_USER_MODEL, dispatch_uid="lattice-live-user-saved")
def _user_saved(sender: Any, instance: Any, created: bool = False, **kwargs: Any) -> None:
    if not created and set(kwargs.get("update_fields") or ()) != {"last_login"}:  # (every login saves that)
        live_recheck_on_commit(instance.pk)


@receiver(post_delete, sender=settings.AUTH_USER_MODEL, dispatch_uid="lattice-live-user-deleted")
def _user_deleted(sender: Any, instance: Any, **kwargs: Any) -> None:
    live_recheck_on_commit(instance.pk)  # (an operator has no membership whose deletion would tell it)
