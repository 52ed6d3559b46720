from django.db import migrations, models
from django.utils import timezone

UNFINISHED = ("queued", "running")


def fail_all_but_the_first(apps, schema_editor):
    """Starts that raced before this constraint may have left more than one evaluation unfinished:
    the earliest running one keeps going (its CPU is spent; else the earliest queued), the others
    are failed and asked to stop, so a task still running one stops at its next progress point
    (the index below allows one)."""
    evaluation = apps.get_model("scheduling", "PolicyEvaluation")
    unfinished = evaluation.objects.filter(status__in=UNFINISHED)
    first = (unfinished.filter(status="running").order_by("created_at", "id").first()
             or unfinished.order_by("created_at", "id").first())
    if first is not None:
        unfinished.exclude(pk=first.pk).update(
            status="failed", finished_at=timezone.now(), cancel_requested=True,
            error=f"stopped: evaluation #{first.pk} ran at the same time (one evaluation runs at a time)")


class Migration(migrations.Migration):

    dependencies = [
        ("scheduling", "0021_usage_generation"),
    ]

    operations = [
        migrations.RunPython(fail_all_but_the_first, migrations.RunPython.noop),
        migrations.AddConstraint(
            model_name="policyevaluation",
            constraint=models.UniqueConstraint(models.Value(True), condition=models.Q(status__in=UNFINISHED),
                                               name="policyevaluation_one_unfinished"),
        ),
    ]
