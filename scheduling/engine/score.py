"""The Lattice queue score of a pending request (pure: numbers in, numbers out).

``Score = (w1*f1 + ... + w9*f9) * budget_penalty``: the weights are the request's vCluster's,
each term is in [0, 1], and a term Lattice cannot know counts as the neutral 0.5. The scheduler
pass (scheduling/passes/score.py) gathers the inputs once per pass and orders a class_cost
group's queue by the result, highest first.

| term | name | what Lattice knows of it |
|---|---|---|
| f1 | priority class | the request's preemption class / 10 |
| f2 | wait time | wait / (wait + 1 h), from the submission time (kept across requeues) |
| f3 | fair-share deficit | (fair_share - share) / fair_share, at least 0; 0.5 without a fair share |
| f4 | topology fitness | 1 / the fewest groups of nodes sharing the ``same`` label it needs; 0.5 without |
| f5 | data readiness | unknown: 0.5 |
| f6 | backlog pressure | GPUs asked for by the queue / the group's GPUs, at most 1 |
| f7 | energy cost | unknown: 0.5 |
| f8 | checkpoint efficiency | 1 / (1 + checkpoint minutes / 10): ``auto`` its estimate, ``manual`` the policy's timeout, ``none`` 0 |
| f9 | conformance fitness | nodes matching its label constraints / nodes it needs, at most 1; 0.5 without |
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

NEUTRAL = 0.5
TERMS = ("f1", "f2", "f3", "f4", "f5", "f6", "f7", "f8", "f9")
TERM_NAMES = {
    "f1": "priority class", "f2": "wait time", "f3": "fair-share deficit", "f4": "topology fitness",
    "f5": "data readiness", "f6": "backlog pressure", "f7": "energy cost", "f8": "checkpoint efficiency",
    "f9": "conformance fitness",
}
WAIT_HALF_S = 3600.0  # f2 is 0.5 after an hour's wait
CHECKPOINT_SCALE_MINUTES = 10.0  # f8 is 0.5 for a ten-minute checkpoint
# The budget penalty: none up to 80 % of the GPU-hours budget used, a cosine fall to the floor
# at 120 %, the floor beyond.
BUDGET_KNEE = 0.8
BUDGET_END = 1.2
BUDGET_FLOOR = 0.05


def budget_penalty(used: float | None) -> float:
    """The multiplier for a tenant that has used ``used`` of its GPU-hours budget (1.0 = all of
    it; None = no budget)."""
    if used is None or used <= BUDGET_KNEE:
        return 1.0
    if used >= BUDGET_END:
        return BUDGET_FLOOR
    phase = (used - BUDGET_KNEE) / (BUDGET_END - BUDGET_KNEE)
    return BUDGET_FLOOR + (1.0 - BUDGET_FLOOR) * (1.0 + math.cos(math.pi * phase)) / 2.0


def budget_used(gpu_hours: float, budget: float | None) -> float | None:
    """The fraction of a budget used; a zero budget is all used at the first GPU-hour."""
    if budget is None:
        return None
    if budget <= 0:
        return 0.0 if gpu_hours <= 0 else math.inf
    return gpu_hours / budget


def f_priority(preemption_class: int) -> float:
    return min(max(preemption_class, 0), 10) / 10.0


def f_wait(wait_s: float) -> float:
    wait = max(wait_s, 0.0)
    return wait / (wait + WAIT_HALF_S)


def f_fair_share(fair_share: float, share: float) -> float:
    if fair_share <= 0:
        return NEUTRAL
    return max(0.0, (fair_share - share) / fair_share)


def f_checkpoint(checkpoint: str, minutes: float, timeout_minutes: float) -> float:
    if checkpoint == "auto":
        return 1.0 / (1.0 + max(minutes, 0.0) / CHECKPOINT_SCALE_MINUTES)
    if checkpoint == "manual":
        return 1.0 / (1.0 + max(timeout_minutes, 0.0) / CHECKPOINT_SCALE_MINUTES)
    return 0.0


def f_backlog(queued_gpus: float, capacity_gpus: float) -> float:
    if capacity_gpus <= 0:
        return NEUTRAL
    return min(1.0, max(queued_gpus, 0.0) / capacity_gpus)


def f_topology(nodes: int, group_sizes: Iterable[int] | None) -> float:
    """``group_sizes``: how many usable nodes share each value of the label the request wants
    its nodes to share (None: it names none, or no node carries it)."""
    sizes = sorted((s for s in group_sizes or () if s > 0), reverse=True)
    if not sizes:
        return NEUTRAL
    needed, covered = 0, 0
    for size in sizes:
        if covered >= nodes:
            break
        covered += size
        needed += 1
    if covered < nodes:
        return 0.0
    return 1.0 / needed


def f_conformance(nodes: int, matching: int | None) -> float:
    """``matching``: usable nodes carrying every label the request asks for (None: it asks none)."""
    if matching is None:
        return NEUTRAL
    return min(1.0, matching / max(nodes, 1))


@dataclass(frozen=True, slots=True)
class Score:
    terms: dict[str, float]
    weights: dict[str, float]
    base: float
    penalty: float
    budget_used: float | None
    total: float

    def to_dict(self) -> dict[str, object]:
        used = self.budget_used
        return {"score": round(self.total, 6), "base": round(self.base, 6), "penalty": round(self.penalty, 6),
                "budget_used": None if used is None else (round(used, 6) if math.isfinite(used) else "inf"),
                "terms": {k: round(v, 6) for k, v in self.terms.items()},
                "weights": {k: round(v, 6) for k, v in self.weights.items()}}


def weight_of(term: str) -> str:
    """The weight of a term: w3 for f3."""
    return "w" + term[1:]


def combine(weights: Mapping[str, float], terms: Mapping[str, float], used: float | None) -> Score:
    """Σ wᵢ·fᵢ over the nine terms (a missing term is neutral, a missing weight 0), times the
    budget penalty of ``used``."""
    full = {k: float(terms.get(k, NEUTRAL)) for k in TERMS}
    w = {weight_of(k): float(weights.get(weight_of(k), 0.0)) for k in TERMS}
    base = sum(w[weight_of(k)] * full[k] for k in TERMS)
    penalty = budget_penalty(used)
    return Score(full, w, base, penalty, used, base * penalty)


def explain_score(stored: Mapping[str, object] | None) -> dict[str, object] | None:
    """A stored score (``Score.to_dict()``) as a reader sees it: each term named with its value,
    weight and part of the sum, and one sentence."""
    if not stored or "terms" not in stored:
        return None
    values = stored.get("terms")
    weights = stored.get("weights")
    if not isinstance(values, Mapping) or not isinstance(weights, Mapping):
        return None
    rows = [{"term": k, "name": TERM_NAMES[k], "value": _num(values.get(k, NEUTRAL)),
             "weight": _num(weights.get(weight_of(k), 0.0)),
             "part": round(_num(values.get(k, NEUTRAL)) * _num(weights.get(weight_of(k), 0.0)), 6)}
            for k in TERMS]
    used = stored.get("budget_used")
    if used is None:
        budget = "no GPU-hours budget"
    elif used == "inf":
        budget = "a zero GPU-hours budget already used"
    else:
        budget = f"{_num(used) * 100:.0f}% of this month's GPU-hours budget used"
    parts = ", ".join(f"{r['name']} {r['value']:.2f} x {r['weight']:.2f}" for r in rows if r["weight"])
    summary = (f"Queue score {_num(stored.get('score')):.3f} = weighted terms {_num(stored.get('base')):.3f} "
               f"x budget penalty {_num(stored.get('penalty')):.2f} ({budget}). Terms: {parts}.")
    return {"score": stored["score"], "base": stored["base"], "penalty": stored["penalty"], "budget_used": used,
            "summary": summary, "terms": rows}


def _num(value: object) -> float:
    return float(value) if isinstance(value, int | float) else 0.0
