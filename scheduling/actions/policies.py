"""Audited changes to policies and configuration (PolicyChange rows)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.core.serializers.json import DjangoJSONEncoder
from django.db import models, transaction
from django.forms.models import model_to_dict

from scheduling.models import PolicyChange


def snapshot(instance: models.Model | None) -> dict[str, Any] | None:
    """A JSON-safe picture of a row, for the before/after of an audit entry."""
    if instance is None:
        return None
    data = model_to_dict(instance)
    return json.loads(json.dumps(data, cls=DjangoJSONEncoder, default=str))


def policy_change_record(
    *,
    actor: AbstractBaseUser | None,
    action: str,
    target: models.Model,
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
    reason: str = "",
) -> PolicyChange:
    return PolicyChange.objects.create(
        actor=actor if actor is not None and actor.is_authenticated else None,
        action=action,
        target_type=target._meta.label_lower,
        target_id=str(target.pk),
        target_repr=str(target)[:255],
        before=before,
        after=after,
        reason=reason,
    )


def config_save(*, actor: AbstractBaseUser | None, reason: str, before: dict[str, Any] | None,
                save: Callable[[], models.Model]) -> models.Model:
    """Save a configuration row (``save``) and write its audit entry in the same transaction:
    "create" when there was no row ``before`` (a snapshot() of it), else "edit"."""
    with transaction.atomic():
        obj = save()
        policy_change_record(actor=actor, action="edit" if before is not None else "create", target=obj,
                             before=before, after=snapshot(obj), reason=reason)
    return obj
