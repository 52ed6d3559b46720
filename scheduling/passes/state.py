"""What one pass carries from request to request, in one object."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from scheduling.engine import Decision
from scheduling.engine import model as em
from scheduling.models import PreemptionDecision
from scheduling.passes.ordering import PassReservations
from scheduling.passes.quota_book import QuotaBook
from scheduling.passes.score import QueueScorer
from scheduling.passes.snapshot import Snapshot

# A staged preemption: its queue row, the engine's decision and its unsaved record.
Staged = tuple[dict, Decision, PreemptionDecision]
# An unsaved record, its preemptor's tenant, its victims.
Record = tuple[PreemptionDecision, int, list[int]]


@dataclass
class PassResult:
    busy: bool = False
    decided: int = 0
    placed: int = 0
    preempted: int = 0
    waiting: int = 0
    more: bool = False
    decisions: list[int] = field(default_factory=list)


@dataclass
class PassState:
    """A pass's snapshot and what it has decided but not written yet.

    ``as_of``: the engine judges the whole pass as of its start, the time of its snapshot: costs
    and protections do not move between two requests of one pass, so what it derives from them
    is computed once per pass instead of once per request. Writes carry their own times.
    """

    snap: Snapshot
    quotas: QuotaBook
    as_of: datetime
    result: PassResult = field(default_factory=PassResult)
    codes: dict[int, str] = field(default_factory=dict)  # each request's last recorded code
    fits: list[tuple[dict, em.Allocation, Decision]] = field(default_factory=list)  # to start together
    staged: list[Staged] = field(default_factory=list)  # preemptions to write together
    waits: list[Record] = field(default_factory=list)  # records of waits whose reason changed
    reserved: set[int] = field(default_factory=set)  # preemptors whose held nodes the pass keeps
    pending: PassReservations = field(default_factory=PassReservations)  # reserved, not yet in snap
    scorer: QueueScorer | None = None  # class_cost: the queue's scores, for the records
    scored: dict[int, float] = field(default_factory=dict)  # each request's last recorded score
