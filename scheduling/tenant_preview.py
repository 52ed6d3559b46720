"""What an unsaved change to a tenant's policies would do (the console's tenant editor): each
member's priority policy as admission would apply it before and after, the tenant's pending work
whose priority the new policy would no longer let be asked for, and the GPU-hours budget's
penalty on the queue score now and after. Nothing is stored."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from scheduling.engine import score as es
from scheduling.models import Allocation, Membership, PriorityPolicy, Quota, priority_policy
from scheduling.passes.budget import used_by_tenant
from scheduling.states import State


@dataclass(frozen=True)
class MemberPreview:
    user: str
    before: PriorityPolicy
    after: PriorityPolicy

    @property
    def changed(self) -> bool:
        return self.before != self.after


def words(policy: PriorityPolicy) -> str:
    """A member's policy in one phrase, as the preview shows it."""
    if not policy.changeable:
        return f"always {policy.default} (may not change it)"
    if policy.empty:
        return f"{policy.default} unless named; no priority may be named (empty range {policy.low}..{policy.high})"
    return f"{policy.default} unless named; may name {policy.low}..{policy.high}"


def tenant_preview(stored: Quota, edited: Quota, members: list[tuple[Membership, Membership]],
                   now: datetime) -> dict[str, Any]:
    """``members``: each member as stored and as edited (the same row when its form is unchanged)."""
    rows = [MemberPreview(old.user.get_username(), priority_policy(stored, old), priority_policy(edited, new))
            for old, new in members]
    after = {m.user: m.after for m in rows}
    outside = []
    for alloc in (Allocation.objects.filter(tenant_id=stored.tenant_id, state=State.PENDING)
                  .select_related("user").order_by("id")[:200]):
        policy = after.get(alloc.user.get_username()) if alloc.user is not None else None
        if policy is None or alloc.priority == policy.default:
            continue
        if not policy.changeable or not policy.low <= alloc.priority <= policy.high:
            outside.append({"id": alloc.pk, "priority": alloc.priority, "user": alloc.user.get_username()})
    used = used_by_tenant({stored.tenant_id: 0.0}, now).get(stored.tenant_id, 0.0)
    return {
        "members": [{"user": m.user, "now": words(m.before), "after": words(m.after), "changed": m.changed,
                     "empty": m.after.empty} for m in rows],
        "outside": outside,
        "budget": {"used": round(used, 3), "now": _budget(used, stored.gpu_hours_budget),
                   "after": _budget(used, edited.gpu_hours_budget)},
        "fair_share": {"now": stored.fair_share, "after": edited.fair_share},
    }


def _budget(used: float, budget: float | None) -> str:
    if budget is None:
        return "no budget: no penalty"
    share = es.budget_used(used, budget)
    penalty = es.budget_penalty(share)
    shown = "all" if share is None or share == float("inf") else f"{share * 100:.0f}%"
    return f"{budget:g} GPU-hours, {shown} used: score x {penalty:.2f}"
