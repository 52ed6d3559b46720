"""``Allocation.leaving`` from the two booleans and ``fail_reason``'s words it replaces, and
``AllocationEvent.node_freed`` from the reason of the event that freed one node of work of
several. The words are copied here as they were written: a migration keeps to its own day's."""

from django.db import migrations
from django.db.models import F, Q

ONE_NODE_EXITED = "exited on "
CHECKPOINT_FAILED_ON = "checkpoint failed: exited on "
WALLTIME_EXCEEDED = "walltime exceeded"
CHUNK = 500  # ids per UPDATE: well under SQLite's and PostgreSQL's limits on parameters


def leaving_of(state, cancel_asked, requeue_asked, fail_reason):
    """What the code read from these: a cancel first, then a failure, then a requeue; work
    leaving with none of them was leaving for a preemption."""
    rank_failed = fail_reason.startswith((ONE_NODE_EXITED, CHECKPOINT_FAILED_ON))
    if cancel_asked:
        return "rank_failed_cancel" if rank_failed else "cancel"
    if fail_reason:
        if rank_failed:
            return "rank_failed"
        if fail_reason.startswith("checkpoint"):
            return "checkpoint_failed"
        if fail_reason.startswith(WALLTIME_EXCEEDED):
            return "walltime"
        return "node_lost"
    if requeue_asked:
        return "requeue"
    if state in ("checkpointing", "terminating"):
        return "preempted"
    return ""


def _update(model, ids, **values):
    for lo in range(0, len(ids), CHUNK):
        model.objects.filter(pk__in=ids[lo:lo + CHUNK]).update(**values)


def fill(apps, schema_editor):
    Allocation = apps.get_model("scheduling", "Allocation")
    AllocationEvent = apps.get_model("scheduling", "AllocationEvent")
    kinds = {}
    rows = (Allocation.objects.filter(Q(cancel_asked=True) | Q(requeue_asked=True) | ~Q(fail_reason="")
                                      | Q(state__in=("checkpointing", "terminating")))
            .order_by("pk").values_list("pk", "state", "cancel_asked", "requeue_asked", "fail_reason"))
    for pk, *old in rows.iterator(chunk_size=2000):
        kind = leaving_of(*old)
        if kind:
            kinds.setdefault(kind, []).append(pk)
    for kind, ids in sorted(kinds.items()):
        _update(Allocation, ids, leaving=kind)
    # LIKE finds the candidates (on SQLite it ignores case); the words are then compared exactly.
    events = (AllocationEvent.objects.filter(reason__startswith=ONE_NODE_EXITED, from_state=F("to_state"))
              .order_by("pk").values_list("pk", "reason"))
    _update(AllocationEvent, [pk for pk, reason in events.iterator(chunk_size=2000)
                              if reason.startswith(ONE_NODE_EXITED)], node_freed=True)


def unfill(apps, schema_editor):
    """Back to the booleans (``fail_reason`` and the events' reasons were kept as they were)."""
    Allocation = apps.get_model("scheduling", "Allocation")
    Allocation.objects.filter(leaving__in=("cancel", "rank_failed_cancel")).update(cancel_asked=True)
    Allocation.objects.filter(leaving="requeue").update(requeue_asked=True)


class Migration(migrations.Migration):

    dependencies = [
        ('scheduling', '0025_leaving_node_freed'),
    ]

    operations = [
        migrations.RunPython(fill, unfill),
    ]
