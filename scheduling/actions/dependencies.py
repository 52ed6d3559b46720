"""Dependencies between one tenant's jobs (Slurm's ``--dependency``): ``afterok`` (the job
completed), ``afterany`` (it ended, however), ``afternotok`` (it ended failed, cancelled or
preempted). Work waiting on a dependency is not considered by the pass; the pass settles the
dependencies of its group's waiting work first (``dependencies_settle``), and the end of any job
asks a pass of the groups where its tenant has work waiting (``allocations.dependents_wake``).

A failed job requeued by its policy lives on in its copy (``requeued_from``): a dependency on it
follows the copies to the latest one. A dependency that can never be met (``afterok`` on work
that failed, ``afternotok`` on work that completed) cancels the waiting job with the reason
``DependencyNeverSatisfied`` unless it was submitted with ``kill_on_invalid_dep: false``: then it
stays pending, marked ``never``, until someone cancels it.
"""

from __future__ import annotations

import contextlib

from django.db import transaction

from scheduling.actions.admission import allocation_cancel
from scheduling.errors import DomainError
from scheduling.models import Allocation, AllocationEvent, ResourceGroup
from scheduling.models.allocations import DependencyStatus, DependencyType
from scheduling.states import FINAL, State

MET, NEVER, WAITING = "met", "never", "waiting"
# How many requeue copies a dependency follows (max_requeue is at most 10).
MAX_COPIES = 11


def verdict(kind: str, state: str | None) -> str:
    """Whether a dependency of ``kind`` on work now in ``state`` is met, never will be, or waits."""
    if state is None or state not in FINAL:
        return WAITING
    completed = state == State.COMPLETED
    if kind == DependencyType.AFTEROK:
        return MET if completed else NEVER
    if kind == DependencyType.AFTERNOTOK:
        return NEVER if completed else MET
    return MET


def effective_states(ids: set[int]) -> dict[int, str]:
    """Each job's state, or that of its latest requeue copy when it ended failed and was requeued."""
    states = dict(Allocation.objects.filter(pk__in=ids).values_list("id", "state"))
    current = {pk: pk for pk in states}  # the job -> the copy that stands for it now
    for _ in range(MAX_COPIES):
        ended = {cur: pk for pk, cur in current.items() if states.get(pk) in FINAL}
        if not ended:
            break
        copies = list(Allocation.objects.filter(requeued_from_id__in=list(ended)).values_list(
            "requeued_from_id", "id", "state"))
        if not copies:
            break
        for parent, copy_id, state in copies:
            current[ended[parent]] = copy_id
            states[ended[parent]] = state
    return states


def dependencies_settle(group: ResourceGroup) -> list[int]:
    """Settle the dependencies of ``group``'s pending work that waits on some: met ones make it
    schedulable, never-satisfiable ones cancel it (or mark it ``never``). Returns the ids whose
    dependencies were met."""
    rows = list(Allocation.objects.filter(resource_group=group, state=State.PENDING,
                                          dependency=DependencyStatus.WAITING)
                .values("id", "depends_on", "kill_on_invalid_dep"))
    if not rows:
        return []
    states = effective_states({int(d["job"]) for r in rows for d in r["depends_on"]})
    met: list[int] = []
    for row in rows:
        verdicts = [(d, verdict(d["type"], states.get(int(d["job"])))) for d in row["depends_on"]]
        never = [d for d, v in verdicts if v == NEVER]
        if never:
            _never(row, never[0], states.get(int(never[0]["job"])))
        elif all(v == MET for _, v in verdicts):
            with transaction.atomic():
                if Allocation.objects.filter(pk=row["id"], state=State.PENDING,
                                             dependency=DependencyStatus.WAITING).update(
                        dependency=DependencyStatus.NONE):
                    AllocationEvent.objects.create(allocation_id=row["id"], from_state=State.PENDING,
                                                   to_state=State.PENDING, reason="dependencies met")
                    met.append(row["id"])
    return met


def _never(row: dict, dep: dict, state: str | None) -> None:
    reason = f"DependencyNeverSatisfied: {dep['type']} on job {dep['job']}, which ended {state}"
    if row["kill_on_invalid_dep"]:
        with contextlib.suppress(DomainError):  # cancelled meanwhile: nothing more to do
            allocation_cancel(allocation=Allocation.objects.get(pk=row["id"]), actor=None, reason=reason)
        return
    with transaction.atomic():
        if Allocation.objects.filter(pk=row["id"], state=State.PENDING, dependency=DependencyStatus.WAITING).update(
                dependency=DependencyStatus.NEVER):
            AllocationEvent.objects.create(allocation_id=row["id"], from_state=State.PENDING,
                                           to_state=State.PENDING,
                                           reason=f"{reason}; kept pending (kill_on_invalid_dep is false)"[:255])
