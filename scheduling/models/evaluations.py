"""Policy evaluations: a group's recorded history replayed under an edited policy against the one
in force (docs/replay.md, "From the console"). One row per run: what was compared, how far it got,
and the replay's report once done. Kept with the audit entry of the save it informed."""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

MIN_DAYS, MAX_DAYS = 1, 30


class EvaluationStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    DONE = "done", "Done"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


UNFINISHED = (EvaluationStatus.QUEUED, EvaluationStatus.RUNNING)
FINISHED = (EvaluationStatus.DONE, EvaluationStatus.FAILED, EvaluationStatus.CANCELLED)


class PolicyEvaluation(models.Model):
    resource_group = models.ForeignKey("scheduling.ResourceGroup", on_delete=models.CASCADE,
                                       related_name="evaluations")
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True,
                                     related_name="policy_evaluations")
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    days = models.PositiveSmallIntegerField(validators=[MinValueValidator(MIN_DAYS), MaxValueValidator(MAX_DAYS)])
    since = models.DateTimeField(help_text="History replayed: allocations submitted from here ...")
    until = models.DateTimeField(help_text="... to here (the moment the evaluation was asked for).")
    current_policy = models.JSONField(help_text="The group's policy when asked (the baseline).")
    candidate_policy = models.JSONField(help_text="The edited policy, not saved when asked.")
    status = models.CharField(max_length=16, choices=EvaluationStatus.choices, default=EvaluationStatus.QUEUED)
    cancel_requested = models.BooleanField(default=False)
    jobs_done = models.PositiveIntegerField(default=0, help_text="Over both policies' replays.")
    jobs_total = models.PositiveIntegerField(default=0)
    progress_at = models.DateTimeField(null=True, blank=True,
                                       help_text="When the task last recorded progress (silent too long: lost).")
    # Text, not jsonb: PostgreSQL's jsonb reorders an object's keys, and the replay's report is
    # read in its own order (its tables list figures in the order the replay writes them).
    report_json = models.TextField(blank=True, help_text="The replay's report (lattice.replay/1), as JSON.")
    error = models.TextField(blank=True)
    policy_change = models.ForeignKey("scheduling.PolicyChange", on_delete=models.SET_NULL, null=True, blank=True,
                                      related_name="evaluations",
                                      help_text="The audit entry of the save this evaluation informed.")

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            # One evaluation queued or running in the whole installation (a replay is CPU-bound):
            # a partial unique index on a constant, so two starts racing cannot both insert.
            models.UniqueConstraint(models.Value(True), condition=models.Q(status__in=UNFINISHED),
                                    name="policyevaluation_one_unfinished"),
        ]

    def __str__(self) -> str:
        return f"evaluation #{self.pk} of {self.resource_group_id} ({self.status})"

    @property
    def finished(self) -> bool:
        return self.status in FINISHED

    @property
    def report(self) -> dict[str, Any] | None:
        return json.loads(self.report_json) if self.report_json else None

    @property
    def percent(self) -> int:
        if self.status == EvaluationStatus.DONE:
            return 100
        return int(100 * self.jobs_done / self.jobs_total) if self.jobs_total else 0
