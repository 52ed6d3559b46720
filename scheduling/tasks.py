"""Celery tasks: ids in, one action called. Retries and limits live here."""

from __future__ import annotations

import logging

from celery import shared_task
from django.conf import settings

from scheduling.actions.lifecycle import allocation_deadline, sweep
from scheduling.evaluations import evaluation_run, evaluations_lost
from scheduling.models import Allocation, ResourceGroup
from scheduling.passes.run import schedule_pass
from scheduling.passes.snapshot_cache import prune
from scheduling.usage import sample
from scheduling.usage_fold import fold

log = logging.getLogger(__name__)


@shared_task(name="scheduling.schedule_resource_group", ignore_result=True, time_limit=120)
def schedule_resource_group(group_id: int) -> None:
    schedule_pass(group_id)


@shared_task(name="scheduling.preemption_deadline", ignore_result=True, time_limit=60)
def preemption_deadline(allocation_id: int) -> None:
    """Kept for deadline messages a broker may still hold from before the batch task; new ones
    are sent as ``preemption_deadlines``."""
    preemption_deadlines([allocation_id])


@shared_task(name="scheduling.preemption_deadlines", ignore_result=True, time_limit=120)
def preemption_deadlines(allocation_ids: list[int]) -> None:
    """The deadlines of these allocations: a batch of victims asked at once (same grace, one
    message, not one each), or one whose deadline moved (extended, deferred)."""
    for alloc in Allocation.objects.filter(pk__in=allocation_ids).order_by("pk"):
        try:
            allocation_deadline(allocation=alloc)
        except Exception:  # the others still get theirs; the periodic sweep retries this one
            log.exception("deadline of allocation %s failed", alloc.pk)


@shared_task(name="scheduling.sweep", ignore_result=True, time_limit=120)
def periodic_sweep() -> None:
    sweep()
    prune()
    evaluations_lost()
    for group_id in ResourceGroup.objects.values_list("pk", flat=True):
        schedule_pass(group_id)


@shared_task(name="scheduling.sample_usage", ignore_result=True, time_limit=300)
def sample_usage() -> None:
    """The usage series: every complete minute not yet sampled, then downsampling and retention.
    Cheap when called more often than once a minute (the embedded loop calls it every round)."""
    if sample():
        fold()


@shared_task(name="scheduling.evaluate_policy", ignore_result=True,
             soft_time_limit=settings.LATTICE_EVALUATION_TIME_LIMIT_S,
             time_limit=settings.LATTICE_EVALUATION_TIME_LIMIT_S + 30)
def evaluate_policy(evaluation_id: int) -> None:
    """A policy evaluation: the group's history replayed under two policies (minutes at most; it
    records its own progress and failure, and stops at a progress point when cancelled). Routed
    to the ``evaluations`` queue; in the ``evaluator`` worker's forked child the soft limit stops
    it as a failure it records, the hard one 30 s later kills the child (then the sweep fails it)."""
    evaluation_run(evaluation_id)
