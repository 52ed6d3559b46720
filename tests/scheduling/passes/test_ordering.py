"""The pure queue key (shared by the pass and the replay) against the database's own order."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest
from django.utils import timezone

from scheduling.engine import Cluster
from scheduling.engine import model as em
from scheduling.models import Allocation, SessionType
from scheduling.passes.ordering import below_since, queue_key, reserve_free
from scheduling.passes.queue import QUEUE_ORDER, pending_queue, row_key


def test_queue_key_orders_by_the_documented_rules():
    def key(kind, **kw):
        base = {"preemption_class": 0, "priority": 10, "submitted_at": 0.0, "ident": 1}
        return queue_key(kind, **{**base, **kw})

    assert key("class_cost", preemption_class=5, priority=1) < key("class_cost", preemption_class=4, priority=99)
    assert key("priority", priority=50, submitted_at=9.0) < key("priority", priority=40, submitted_at=1.0)
    assert key("queue", session_priority=0) < key("queue", session_priority=None)  # no type: last
    assert key("rank", rank=None, session_rank=7) < key("rank", rank=3, session_rank=9)
    assert key("fair_share", starving=True, deficit=0.0) < key("fair_share", deficit=0.9)
    assert key("fair_share", deficit=0.5) < key("fair_share", deficit=0.1)
    with pytest.raises(ValueError, match="nope"):
        key("nope")


def test_below_since_starts_keeps_and_clears():
    assert below_since(0.1, 0.5, 0.8, True, None, 7.0) == 7.0
    assert below_since(0.1, 0.5, 0.8, True, 3.0, 7.0) == 3.0
    assert below_since(0.1, 0.5, 0.8, False, 3.0, 7.0) is None  # no demand, not starved
    assert below_since(0.45, 0.5, 0.8, True, 3.0, 7.0) is None  # within tolerance


def test_reserve_free_takes_only_what_is_free():
    cluster = Cluster([em.Node("n1", {"gpu": 8})], [em.Allocation("1", placement={"n1": {"gpu": 3}})])
    reserve_free(cluster, "hold:9", ["n1", "gone"])
    assert cluster.used[0, cluster.res_index["gpu"]] == 8
    cluster.remove("hold:9")
    assert cluster.used[0, cluster.res_index["gpu"]] == 3


@pytest.mark.parametrize("kind", ["class_cost", "priority", "queue", "rank"])
def test_database_order_and_pure_key_agree(kind, resource_group, make_allocation):
    rng = random.Random(kind)
    types = [SessionType.objects.create(resource_group=resource_group, name=f"t{i}", priority=p, rank=r)
             for i, (p, r) in enumerate([(0, 1), (5, 3), (5, 9)])]
    base = timezone.now()
    for _ in range(40):
        make_allocation(preemption_class=rng.randint(0, 3), priority=rng.choice([10, 20, 30]),
                        submitted_at=base + timedelta(seconds=rng.randint(0, 5)),
                        session_type=rng.choice([*types, None]), rank=rng.choice([None, 2, 9]))
    by_db = list(Allocation.objects.filter(resource_group=resource_group).order_by(*QUEUE_ORDER[kind])
                 .values_list("id", flat=True))
    rows = pending_queue(resource_group, kind, 100, held=set())
    by_key = [r["id"] for r in sorted(rows, key=lambda r: row_key(kind, r, {}))]
    assert by_db == by_key
    assert [r["id"] for r in rows] == by_key
