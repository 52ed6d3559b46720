"""Policy evaluations from the console: a group's recorded history of the last N days replayed
under the edited policy against the one in force, as a task (docs/replay.md, "From the console").

The replay is the ``replay`` command's own (``scheduling.replay``: the group's history read by
``history``, the simulation and report of ``run`` and ``report``); this module asks for it, records
its progress at the simulation's progress points, stops it there when cancelled, and keeps the
report. ``evaluation_start``, ``evaluation_cancel`` and ``policy_save_evaluated`` are called by
the pages; ``evaluation_run`` by the task (``scheduling.evaluate_policy``, sent by name).
"""

from __future__ import annotations

import json
import logging
import time
from datetime import datetime, timedelta
from typing import Any

from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F, Q
from django.utils import timezone

from scheduling.actions.overrides import group_policy_edit
from scheduling.dispatch import background_task_on_commit
from scheduling.engine import InvalidDocument, parse_policy
from scheduling.engine import model as em
from scheduling.errors import Conflict
from scheduling.models import EvaluationStatus, PolicyChange, PolicyEvaluation, ResourceGroup
from scheduling.models.evaluations import UNFINISHED
from scheduling.replay import history
from scheduling.replay.report import report
from scheduling.replay.run import replay
from scheduling.replay.sim import Simulation
from scheduling.replay.spec import ClusterSpec
from scheduling.replay.trace import ReplayError

log = logging.getLogger(__name__)

EVALUATE_TASK = "scheduling.evaluate_policy"
# The names the two policies have in the report (and the ``replay`` command's when given files
# named so): the group's policy when asked, and the edited one.
BASELINE, CANDIDATE = "current", "edited"
PROGRESS_EVERY_S = 0.5  # progress is written, and a cancel looked for, at most this often
# A running evaluation records progress every PROGRESS_EVERY_S; one silent for this long lost its
# worker (or, embedded, its web process): the sweep marks it failed. A queued one that no worker
# took within QUEUED_LOST_S is failed too (its message was lost with the broker).
SILENT_LOST_S = 600
QUEUED_LOST_S = 3600
# A delivery finding its run silent this long takes it over (well before the sweep fails it).
PROGRESS_SILENT_S = 120


class Cancelled(Exception):
    """An operator cancelled the evaluation: raised at the replay's next progress point."""


def evaluation_start(*, group: ResourceGroup, candidate: dict[str, Any], days: int, actor: Any) -> PolicyEvaluation:
    """Record the evaluation (the window ends now) and send its task once that is committed.
    One evaluation runs at a time in the whole installation (``Conflict`` while another is queued
    or running): a replay is CPU-bound and shares the worker (or, embedded, the web process) with
    the scheduler passes and the agents' frames."""
    now = timezone.now()
    with transaction.atomic():
        ResourceGroup.objects.select_for_update().filter(pk=group.pk).first()  # one start at a time per group
        _refuse_if_busy()
        try:
            # Two starts for two groups both find none unfinished; the database's partial unique
            # index (one unfinished row) lets only one of them in.
            with transaction.atomic():
                evaluation = PolicyEvaluation.objects.create(
                    resource_group=group, requested_by=actor if actor is not None and actor.is_authenticated else None,
                    days=days, since=now - timedelta(days=days), until=now, current_policy=group.policy,
                    candidate_policy=candidate)
        except IntegrityError:
            _refuse_if_busy()
            raise Conflict("another evaluation started at the same moment: one evaluation runs at a time") from None
        background_task_on_commit(EVALUATE_TASK, evaluation.pk)
    return evaluation


def _refuse_if_busy() -> None:
    busy = PolicyEvaluation.objects.filter(status__in=UNFINISHED).select_related("resource_group").first()
    if busy is not None:
        raise Conflict(f"evaluation #{busy.pk} of {busy.resource_group.name} is {busy.status}: one evaluation "
                       "runs at a time; wait for it or cancel it")


def evaluation_cancel(*, evaluation: PolicyEvaluation) -> None:
    """A queued evaluation is cancelled at once; a running one at its next progress point."""
    rows = PolicyEvaluation.objects.filter(pk=evaluation.pk)
    rows.filter(status=EvaluationStatus.QUEUED).update(status=EvaluationStatus.CANCELLED, cancel_requested=True,
                                                       finished_at=timezone.now())
    rows.filter(status=EvaluationStatus.RUNNING).update(cancel_requested=True)


def evaluation_run(evaluation_id: int) -> None:
    """The task's body. A message delivered again takes the run over only when the run has gone
    silent (its worker was lost): a live run keeps it, so two never run at once."""
    now = timezone.now()
    claimable = Q(status=EvaluationStatus.QUEUED) | Q(
        status=EvaluationStatus.RUNNING, progress_at__lt=now - timedelta(seconds=PROGRESS_SILENT_S))
    claimed = PolicyEvaluation.objects.filter(claimable, pk=evaluation_id, cancel_requested=False).update(
        status=EvaluationStatus.RUNNING, started_at=now, progress_at=now, jobs_done=0)
    if not claimed and PolicyEvaluation.objects.filter(pk=evaluation_id, status=EvaluationStatus.RUNNING,
                                                       cancel_requested=False).exists():
        return  # another delivery is running it
    if not claimed:
        _finish(evaluation_id, EvaluationStatus.CANCELLED)  # cancelled before it could start (if not already)
        return
    evaluation = PolicyEvaluation.objects.select_related("resource_group").get(pk=evaluation_id)
    try:
        doc = _replay(evaluation)
    except Cancelled:
        _finish(evaluation_id, EvaluationStatus.CANCELLED)
    except ReplayError as exc:
        _finish(evaluation_id, EvaluationStatus.FAILED, error=str(exc))
    except SoftTimeLimitExceeded:
        limit = settings.LATTICE_EVALUATION_TIME_LIMIT_S
        _finish(evaluation_id, EvaluationStatus.FAILED,
                error=f"stopped at its time limit ({limit} s, LATTICE_EVALUATION_TIME_LIMIT_S): evaluate fewer days")
    except Exception:
        log.exception("evaluation %s failed", evaluation_id)
        _finish(evaluation_id, EvaluationStatus.FAILED, error="internal error (see the worker's log)")
    else:
        _finish(evaluation_id, EvaluationStatus.DONE, report_json=json.dumps(doc), jobs_done=F("jobs_total"))


def _finish(evaluation_id: int, status: str, **fields: Any) -> None:
    PolicyEvaluation.objects.filter(pk=evaluation_id).exclude(status__in=[
        EvaluationStatus.DONE, EvaluationStatus.FAILED, EvaluationStatus.CANCELLED,
    ]).update(status=status, finished_at=timezone.now(), **fields)


def evaluations_lost(*, now: datetime | None = None) -> int:
    """Fail the evaluations whose task is gone: running but silent past ``SILENT_LOST_S``, or
    queued past ``QUEUED_LOST_S``. Called by the periodic sweep; a page never shows one running
    for ever. A task that was only slow and speaks again finds its row finished and its
    report is not kept (its ``_finish`` leaves finished rows alone)."""
    moment = now or timezone.now()
    silent = PolicyEvaluation.objects.filter(status=EvaluationStatus.RUNNING,
                                             progress_at__lt=moment - timedelta(seconds=SILENT_LOST_S))
    lost = silent.update(status=EvaluationStatus.FAILED, finished_at=moment,
                         error=f"lost: no progress for {SILENT_LOST_S // 60} minutes (its worker stopped); "
                               "ask for it again")
    unclaimed = PolicyEvaluation.objects.filter(status=EvaluationStatus.QUEUED,
                                                created_at__lt=moment - timedelta(seconds=QUEUED_LOST_S))
    return lost + unclaimed.update(status=EvaluationStatus.FAILED, finished_at=moment,
                                   error=f"never started: no worker took it within {QUEUED_LOST_S // 60} minutes")


def effective(doc: dict[str, Any]) -> dict[str, Any]:
    """A policy document with every field the engine reads, defaults filled in (a stored policy
    names only what differs from them), so that two policies compare field by field."""
    try:
        policy = parse_policy(doc)
    except InvalidDocument:
        return doc
    return {f: (list(v) if isinstance(v, tuple) else v) for f in policy.__dataclass_fields__
            if (v := getattr(policy, f)) is not None}


def _policy(doc: dict[str, Any], which: str) -> em.Policy:
    try:
        return parse_policy(doc)
    except InvalidDocument as exc:
        raise ReplayError(f"{which} policy: " + "; ".join(f"{p or 'policy'}: {m}" for p, m in exc.errors)) from exc


def _replay(evaluation: PolicyEvaluation) -> dict[str, Any]:
    """What ``manage.py replay GROUP --format lattice --group GROUP --from SINCE --until UNTIL
    --policy current.json --compare edited.json --json`` reports."""
    group = evaluation.resource_group
    spec, _ = history.spec_from_group(group)
    policies = [(BASELINE, _policy(evaluation.current_policy, BASELINE)),
                (CANDIDATE, _policy(evaluation.candidate_policy, CANDIDATE))]
    PolicyEvaluation.objects.filter(pk=evaluation.pk).update(progress_at=timezone.now())  # the history read
    jobs, stats = history.history_jobs(group, evaluation.since, evaluation.until, None, spec, None)
    meter = Meter(evaluation.pk, len(jobs), len(policies))
    meter.record(0)  # the total is known: shown at once, and a cancel already asked for is seen
    sections = replay(jobs, spec, policies, simulation=meter.simulation)
    trace = {"source": group.name, "format": "lattice", **stats.to_dict(),
             "first_submit": jobs[0].submit if jobs else None, "last_submit": jobs[-1].submit if jobs else None}
    settings = {"seed": 0, "checkpoint_jitter": 0.0, "jobs": None, "from": evaluation.since.isoformat(),
                "until": evaluation.until.isoformat(), "mapping": None}
    return report(trace, spec.describe(), settings, sections)


class Meter:
    """The replay's progress points (after each of the simulation's passes), written to the row at
    most every ``PROGRESS_EVERY_S``; each write looks for a cancel and raises ``Cancelled``."""

    def __init__(self, evaluation_id: int, jobs: int, policies: int) -> None:
        self.pk, self.per_policy, self.total = evaluation_id, jobs, jobs * policies
        self.round = -1
        self.last = 0.0
        PolicyEvaluation.objects.filter(pk=evaluation_id).update(jobs_total=self.total)

    def simulation(self, jobs: Any, spec: ClusterSpec, policy: em.Policy, **options: Any) -> Simulation:
        """``run.replay``'s factory: each policy's simulation, reporting here."""
        self.round += 1
        return Simulation(jobs, spec, policy, **{**options, "on_progress": self.point})

    def point(self, done: int, _t: float) -> None:
        now = time.monotonic()
        if now - self.last >= PROGRESS_EVERY_S:
            self.last = now
            self.record(self.round * self.per_policy + done)

    def record(self, done: int) -> None:
        rows = PolicyEvaluation.objects.filter(pk=self.pk)
        rows.update(jobs_done=done, progress_at=timezone.now())
        if rows.filter(cancel_requested=True).exists():
            raise Cancelled


def policy_save_evaluated(*, group: ResourceGroup, policy: dict[str, Any], actor: Any, reason: str,
                          evaluation_id: int | None) -> ResourceGroup:
    """Save the group's policy (audited) and keep with its audit entry the evaluation of this very
    change on this group, when the editor came from one that finished. Nothing is kept when the
    edited policy differs from the one evaluated, when the group's policy is no longer the baseline
    the evaluation compared it with (another save came in between: its report answers another
    question), or when the run failed or was cancelled (it evaluated nothing)."""
    with transaction.atomic():
        before = ResourceGroup.objects.select_for_update().values_list("policy", flat=True).get(pk=group.pk)
        saved = group_policy_edit(group=group, policy=policy, actor=actor, reason=reason)
        evaluation = PolicyEvaluation.objects.filter(pk=evaluation_id, resource_group=group).first() \
            if evaluation_id else None
        if evaluation is not None and evaluation.status == EvaluationStatus.DONE \
                and evaluation.candidate_policy == policy and evaluation.current_policy == before:
            # The group's row is locked by the edit until commit: its newest entry is this save's.
            change = PolicyChange.objects.filter(target_type=ResourceGroup._meta.label_lower,
                                                 target_id=str(group.pk)).order_by("-id").first()
            PolicyEvaluation.objects.filter(pk=evaluation.pk).update(policy_change=change)
    return saved
