"""Plain-language explanations a tenant can read (one or two sentences)."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Protocol

from .model import Allocation, Policy, victim_action

if TYPE_CHECKING:
    from .cluster import Cluster


class _VictimLike(Protocol):
    @property
    def id(self) -> str: ...
    @property
    def reason(self) -> str: ...
    @property
    def action(self) -> str: ...
    @property
    def mode(self) -> str | None: ...


WAIT_TEXT = {
    "AWAITING_VICTIMS": "the allocations chosen to make room for it are still leaving {nodes}",
    "PREEMPTION_DISABLED": "preemption is disabled in this resource group, so it waits for capacity to free up",
    "PREEMPTION_PAUSED": "an operator has paused preemption in this resource group, so it waits for capacity to free up",
    "NOT_PREEMPTIVE": "it is not allowed to preempt other work, so it waits for capacity to free up",
    "EXCLUSIVE_NOT_PREEMPTIVE": ("it asks for whole nodes (exclusive), and this group's policy does not let "
                                 "exclusive jobs preempt, so it waits for nodes to empty"),
    "NOT_STARVING": "its tenant has not been below its fair share long enough to preempt others",
    "PREEMPTION_BACKOFF": "this resource group started work by preemption moments ago and waits a few "
                          "seconds between such starts; it is tried again then",
    "NOT_UNDER_ALLOCATED": "its tenant already holds at least its fair share, so it may not preempt others",
    "NO_USABLE_NODES": "no node it may use could ever hold it (check its size, labels and vCluster)",
    "NO_FEASIBLE_SET": "even preempting every eligible allocation would not free enough room",
    "EXCEEDS_MAX_VICTIMS": "making room would need more victims than the policy allows ({bound})",
    "COST_EXCEEDS_VALUE": "every way of making room costs at least its stated value ({value})",
}

ACTION_TEXT = {
    ("suspend", "checkpoint"): "checkpointed and requeued",
    ("suspend", "terminate"): "stopped and requeued",
    ("requeue", "terminate"): "stopped and requeued from the start",
    ("terminate", "terminate"): "stopped for good",
}


def _need(req: Allocation) -> str:
    size = ", ".join(f"{r}={_n(a)}" for r, a in sorted(req.per_node.items())) or "no resources"
    plural = "node" if req.nodes == 1 else "nodes"
    return f"{req.nodes} {plural} with {size}"


def _n(x: float | None) -> str:
    if x is None:
        return "unlimited"
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def _list(names: tuple[str, ...]) -> str:
    return ", ".join(names) if names else "none"


def explain(req: Allocation, policy: Policy, outcome: str, code: str, nodes: tuple[str, ...],
            victims: tuple[_VictimLike, ...], borrowed: tuple[str, ...], cluster: Cluster) -> str:
    head = f"{req.id} (class {req.preemption_class}, priority {req.priority}) needs {_need(req)}"
    if outcome == "fits":
        where = f"it fits on {_list(nodes)} without preempting anything"
        if borrowed:
            where += f", borrowing {_list(borrowed)} from another vCluster"
        return f"{head}; {where}."
    if outcome == "wait":
        text = WAIT_TEXT.get(code, code).format(
            nodes=_list(nodes), bound=_n(policy.max_victims), value=_n(req.value))
        return f"{head}; it cannot start on free capacity now, and {text}."
    reasons = sorted({v.reason for v in victims})
    why = {
        "priority": f"lower-{'class' if policy.kind == 'class_cost' else 'priority'} work",
        "reclaim": "work borrowed from its vCluster's own nodes",
        "sensitive": "work displaced by this sensitive emergency claim",
        "fair_share": "work of tenants above their fair share",
    }
    parts = "; ".join(why[r] for r in reasons)
    actions = sorted({ACTION_TEXT.get((policy.mode, _policy_action(v, policy, cluster)), "stopped")
                      for v in victims})
    count = len(victims)
    noun = "allocation" if count == 1 else "allocations"
    return (f"{head}; no free capacity on the nodes it may use, so {count} {noun} ({parts}) will be "
            f"{' or '.join(actions)} to run it on {_list(nodes)}.{_override_note(victims)}")


def _policy_action(victim: _VictimLike, policy: Policy, cluster: Cluster) -> str:
    """What the policy's own mode does to the victim (its session type may do otherwise)."""
    if victim.mode is None:
        return victim.action
    slot = cluster.slot_of.get(victim.id)
    alloc = cluster.objs[slot] if slot is not None else None
    return victim_action(policy.mode, alloc.checkpoint if alloc is not None else "none")


def _override_note(victims: tuple[_VictimLike, ...]) -> str:
    """What session types' modes changed, without naming the victims (tenants read it)."""
    texts = Counter(ACTION_TEXT.get((v.mode, v.action), "stopped") for v in victims if v.mode is not None)
    if not texts:
        return ""
    return " By their session types' mode, " + "; ".join(
        f"{n} of them will instead be {text}" for text, n in sorted(texts.items())) + "."
