"""Bulk inserts of constant text: the same rows as the ORM would write, ids in order."""

from __future__ import annotations

import pytest
from django.utils import timezone

from scheduling.models import AllocationEvent, Placement, PreemptionDecision
from scheduling.passes.bulk import insert_rows

pytestmark = pytest.mark.django_db


def test_inserted_rows_read_back_as_given_with_ids_in_order(make_allocation, resource_group):
    allocs = [make_allocation() for _ in range(3)]
    before = timezone.now()
    reasons = ['placed on "n1"', "it's \\ back", "ünïcode, {braces}"]
    ids = insert_rows(AllocationEvent, ["allocation_id", "from_state", "to_state", "reason"],
                      [(a.pk, "pending", "running", r) for a, r in zip(allocs, reasons, strict=True)], returning=True)
    rows = {e.pk: e for e in AllocationEvent.objects.filter(pk__in=ids)}
    assert [(rows[pk].allocation_id, rows[pk].reason) for pk in ids] == [
        (a.pk, r) for a, r in zip(allocs, reasons, strict=True)]
    assert all(rows[pk].created_at >= before and rows[pk].decision_id is None for pk in ids)


def test_json_documents_and_defaults(make_allocation, resource_group):
    alloc = make_allocation()
    docs = [[{"id": "7", "reason": 'a "quoted" reason', "cost": 1.5, "none": None}], [], ["\u00e9", {"a": [1, 2]}]]
    now = timezone.now()
    ids = insert_rows(PreemptionDecision, ["resource_group_id", "preemptor_id", "decided_for", "result", "code",
                                           "candidates", "explanation", "latency_ms"],
                      [(resource_group.pk, alloc.pk, now, "wait", "NO_CAPACITY", d, "why", None) for d in docs],
                      returning=True)
    records = PreemptionDecision.objects.in_bulk(ids)
    assert [records[pk].candidates for pk in ids] == docs
    first = records[ids[0]]
    assert (first.nodes, first.victims, first.policy_snapshot, first.trigger, first.outcome, first.latency_ms) == (
        [], [], {}, "", "recorded", None)  # the model's defaults, as bulk_create would give


def test_no_rows_writes_nothing(db):
    assert insert_rows(Placement, ["allocation_id", "node_id"], [], returning=True) == []
    assert not Placement.objects.exists()


def test_a_refused_row_raises_django_integrity_error_and_writes_nothing(make_allocation, node_gpu_a):
    from django.db import IntegrityError, transaction

    alloc = make_allocation()
    with pytest.raises(IntegrityError), transaction.atomic():
        insert_rows(Placement, ["allocation_id", "node_id"], [(alloc.pk, node_gpu_a.pk), (alloc.pk, node_gpu_a.pk)])
    assert not Placement.objects.filter(allocation=alloc).exists()
