"""GPU-hours from the history: exact to the second, split at midnight UTC, visible per tenant."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta

import pytest

from scheduling import accounting
from scheduling.models import AllocationEvent

D = datetime(2026, 3, 1, tzinfo=UTC)


def at(day: int, hh: int, mm: int, ss: float = 0) -> datetime:
    return D + timedelta(days=day, hours=hh, minutes=mm, seconds=ss)


def history(alloc, moves):
    """Write ``alloc``'s events at the given times, as the actions would have."""
    previous = ""
    for to_state, moment in moves:
        event = AllocationEvent.objects.create(allocation=alloc, from_state=previous, to_state=to_state)
        AllocationEvent.objects.filter(pk=event.pk).update(created_at=moment)
        previous = to_state
    alloc.state, alloc.state_changed_at = previous, moves[-1][1]
    alloc.save(update_fields=["state", "state_changed_at"])
    return alloc


@pytest.fixture
def preempted_and_resumed(make_allocation, vcluster_hpc):
    """8 GPUs on 2 nodes: runs, is preempted (checkpoints), suspended, resumed across midnight, completes."""
    alloc = make_allocation(node_count=2, per_node_gpu=4, vcluster=vcluster_hpc, submitted_at=at(0, 22, 0))
    return history(alloc, [
        ("pending", at(0, 22, 0)),
        ("running", at(0, 23, 10, 0.5)),
        ("checkpointing", at(0, 23, 40)),   # preempted: still holds its GPUs while it saves
        ("suspended", at(0, 23, 41, 30)),
        ("pending", at(0, 23, 41, 30)),
        ("running", at(0, 23, 50)),         # resumed
        ("completed", at(1, 0, 35, 10)),
    ])


# Computed by hand from the times above, not by the code under test:
# day 0: 23:10:00.5 -> 23:41:30 is 1,889.5 s, 23:50:00 -> 24:00:00 is 600 s: 2,489.5 s x 8 GPUs
# day 1: 00:00:00 -> 00:35:10 is 2,110 s x 8 GPUs
DAY0_SECONDS, DAY1_SECONDS = 1889.5 + 600, 2110


@pytest.mark.django_db
def test_billed_exactly_its_holding_seconds_times_gpus_per_day(preempted_and_resumed, tenant_physics):
    sums = accounting.totals(accounting.intervals(since=D - timedelta(days=1), until=D + timedelta(days=3)),
                             ("tenant", "day"))
    assert sums == {
        (tenant_physics.pk, D.date()): (int(DAY0_SECONDS * 8 * 1_000_000), int(DAY0_SECONDS * 2 * 1_000_000)),
        (tenant_physics.pk, (D + timedelta(days=1)).date()): (DAY1_SECONDS * 8 * 1_000_000,
                                                              DAY1_SECONDS * 2 * 1_000_000),
    }
    hours = accounting.gpu_hours(since=D - timedelta(days=1), until=D + timedelta(days=3))
    assert hours == {(tenant_physics.pk,): pytest.approx((DAY0_SECONDS + DAY1_SECONDS) * 8 / 3600, abs=1e-12)}


@pytest.mark.django_db
def test_window_clips_intervals_and_an_open_interval_counts_to_until(preempted_and_resumed, make_allocation):
    # Only 23:30 -> 00:10 of the history: 23:30 -> 23:41:30 (690 s) + 23:50 -> 00:10 (1,200 s).
    sums = accounting.totals(accounting.intervals(since=at(0, 23, 30), until=at(1, 0, 10)), ("day",))
    assert sums == {(D.date(),): (1290 * 8 * 1_000_000, 1290 * 2 * 1_000_000),
                    ((D + timedelta(days=1)).date(),): (600 * 8 * 1_000_000, 600 * 2 * 1_000_000)}
    running = history(make_allocation(node_count=1, per_node_gpu=2, submitted_at=at(2, 0, 0)),
                      [("pending", at(2, 0, 0)), ("running", at(2, 1, 0))])
    sums = accounting.totals(accounting.intervals(since=at(2, 0, 0), until=at(2, 3, 0)), ("day",))
    assert running.state == "running"
    assert sums == {((D + timedelta(days=2)).date(),): (7200 * 2 * 1_000_000, 7200 * 1_000_000)}


@pytest.mark.django_db
def test_usage_api_tenants_see_their_own_operators_all(preempted_and_resumed, tenant_chemistry, operator, api_for):
    window = {"since": "2026-02-28T00:00:00Z", "until": "2026-03-04T00:00:00Z"}
    alice = api_for("alice")
    body = alice.get("/api/v1/usage/", window).json()
    assert [(r["tenant"], r["day"], r["gpu_seconds"]) for r in body["rows"]] == [
        ("physics", "2026-03-01", 19916), ("physics", "2026-03-02", 16880)]   # 2,489.5 x 8 and 2,110 x 8
    assert body["rows"][1]["gpu_hours"] == round(16880 / 3600, 6) and body["rows"][1]["node_hours"] == round(
        2110 * 2 / 3600, 6)
    assert alice.get("/api/v1/usage/", {**window, "tenant": "chemistry"}).status_code == 403
    bob = api_for("bob")
    assert bob.get("/api/v1/usage/", window).json()["rows"] == []
    op = api_for("op")
    rows = op.get("/api/v1/usage/", {**window, "group_by": "user,vcluster"}).json()["rows"]
    assert rows == [{"user": "alice", "vcluster": "hpc", "gpu_seconds": 36796,
                     "gpu_hours": round(36796 / 3600, 6), "node_hours": round(4599.5 * 2 / 3600, 6)}]


@pytest.mark.django_db
def test_usage_csv_download_and_bad_input(preempted_and_resumed, api_for):
    alice = api_for("alice")
    window = {"since": "2026-02-28T00:00:00Z", "until": "2026-03-04T00:00:00Z"}
    for response in (alice.get("/api/v1/usage/", {**window, "format": "csv"}),
                     alice.get("/api/v1/usage/", window, HTTP_ACCEPT="text/csv")):
        assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
        assert "attachment" in response["Content-Disposition"]
        rows = list(csv.DictReader(io.StringIO(response.content.decode())))
        assert [(r["tenant"], r["day"], r["gpu_seconds"]) for r in rows] == [
            ("physics", "2026-03-01", "19916"), ("physics", "2026-03-02", "16880")]
    bad = alice.get("/api/v1/usage/", {"group_by": "tenant,colour"})
    assert bad.status_code == 400 and "group_by" in bad.json()
    bad = alice.get("/api/v1/usage/", {"since": "2026-03-04T00:00:00Z", "until": "2026-03-01T00:00:00Z"})
    assert bad.status_code == 400 and "since" in bad.json()
    # A name no tenant has reads to a member as another tenant's does (test_isolation_attack.py).
    assert alice.get("/api/v1/usage/", {"tenant": "nobody"}).status_code == 403
    bad = alice.get("/api/v1/usage/", {"group_by": "colour", "format": "csv"})  # errors are JSON all the same
    assert bad.status_code == 400 and bad["Content-Type"] == "application/json" and "group_by" in bad.json()
    bad = alice.get("/api/v1/usage/", {"format": "xml"})
    assert bad.status_code == 400 and "format" in bad.json()


def test_split_at_midnight_covers_the_interval_exactly():
    pieces = list(accounting.split_at_midnight(at(0, 23, 0), at(2, 1, 0)))
    assert [(d.isoformat(), (e - s).total_seconds()) for d, s, e in pieces] == [
        ("2026-03-01", 3600.0), ("2026-03-02", 86400.0), ("2026-03-03", 3600.0)]


@pytest.mark.django_db
def test_allocations_beyond_one_querys_parameters_are_read_in_parts(preempted_and_resumed, make_allocation,
                                                                     monkeypatch):
    """PostgreSQL takes at most 65,535 parameters a statement: the events of more allocations than
    that are read in parts (here parts of one), with the same sums."""
    history(make_allocation(node_count=1, per_node_gpu=2, submitted_at=at(0, 22, 0)),
            [("pending", at(0, 22, 0)), ("running", at(0, 23, 0)), ("completed", at(0, 23, 30))])
    monkeypatch.setattr(accounting, "IDS_PER_QUERY", 1)
    sums = accounting.totals(accounting.intervals(since=D - timedelta(days=1), until=D + timedelta(days=3)),
                             ("day",))
    # The fixture's 2,489.5 s x 8 GPUs on day 0 and 2,110 s on day 1, plus 1,800 s x 2 GPUs on day 0.
    assert sums[(D.date(),)][0] == int((DAY0_SECONDS * 8 + 1800 * 2) * 1_000_000)
    assert sums[((D + timedelta(days=1)).date(),)][0] == DAY1_SECONDS * 8 * 1_000_000


@pytest.mark.django_db
def test_usage_csv_never_gives_a_spreadsheet_a_formula(preempted_and_resumed, api_for):
    """A username may start with ``-``, ``+`` or ``@``: in the CSV download it is written with a
    leading apostrophe, so a spreadsheet shows the name and evaluates nothing; numbers stay numbers."""
    from django.contrib.auth import get_user_model

    get_user_model().objects.filter(username="alice").update(username="-1+1")
    client = api_for("-1+1")
    window = {"since": "2026-02-28T00:00:00Z", "until": "2026-03-04T00:00:00Z", "group_by": "user"}
    response = client.get("/api/v1/usage/", {**window, "format": "csv"})
    assert response.status_code == 200
    header, row = response.content.decode().splitlines()
    user, gpu_seconds, gpu_hours, node_hours = row.split(",")
    assert header == "user,gpu_seconds,gpu_hours,node_hours" and user == "'-1+1"
    # The fixture's 8 GPUs on 2 nodes, over both days: numbers as they are, never quoted.
    assert int(gpu_seconds) == int((DAY0_SECONDS + DAY1_SECONDS) * 8)
    assert float(node_hours) == pytest.approx((DAY0_SECONDS + DAY1_SECONDS) * 2 / 3600, abs=1e-5)
    assert client.get("/api/v1/usage/", window).json()["rows"][0]["user"] == "-1+1"  # JSON is as stored


@pytest.mark.django_db
def test_work_of_two_nodes_is_not_billed_for_a_node_its_process_there_has_left(make_allocation, vcluster_hpc,
                                                                                tenant_physics):
    """Each node of multi-node work is freed as its process there is gone, and others may run there:
    billing both nodes to the end counted that node's GPUs twice."""
    alloc = history(make_allocation(node_count=2, per_node_gpu=4, vcluster=vcluster_hpc, submitted_at=at(3, 0, 0)),
                    [("pending", at(3, 0, 0)), ("running", at(3, 1, 0))])
    for reason, moment, freed in (("started on gpu-a (pid 1), gpu-b (pid 2)", at(3, 1, 0, 1), False),
                                  ("exited on gpu-b: completed (0); 1 more node(s) still running", at(3, 2, 0), True)):
        event = AllocationEvent.objects.create(allocation=alloc, from_state="running", to_state="running",
                                               reason=reason, node_freed=freed)
        AllocationEvent.objects.filter(pk=event.pk).update(created_at=moment)
    event = AllocationEvent.objects.create(allocation=alloc, from_state="running", to_state="completed")
    AllocationEvent.objects.filter(pk=event.pk).update(created_at=at(3, 4, 0))
    sums = accounting.totals(accounting.intervals(since=at(3, 0, 0), until=at(4, 0, 0)), ("tenant",))
    # 1 h on both nodes (8 GPUs), then 2 h on one (4 GPUs)
    assert sums == {(tenant_physics.pk,): ((3600 * 8 + 7200 * 4) * 1_000_000, (3600 * 2 + 7200) * 1_000_000)}


@pytest.mark.django_db
def test_work_of_two_nodes_is_not_billed_for_a_node_lost_while_it_leaves_the_other(make_allocation, resource_group,
                                                                                    vcluster_hpc, two_nodes):
    """A node lost under running work of two nodes is freed at once (the work is killed on the
    other, which it keeps until gone): from then on only the other node is billed."""
    from django.db.models import Q

    from nodes.actions import allocation_lost
    from nodes.late_exits import lost_node_down
    from scheduling.models import Allocation
    from scheduling.passes.run import schedule_pass

    alloc = make_allocation(state="pending", node_count=2, per_node_gpu=4, vcluster=vcluster_hpc)
    schedule_pass(resource_group.pk)
    alloc = Allocation.objects.get(pk=alloc.pk)
    started, lost = alloc.started_at - timedelta(hours=2), alloc.started_at - timedelta(hours=1)  # (in the past)
    allocation_lost(allocation=alloc, reason=lost_node_down("gpu-b"), now=lost, node=two_nodes[1])
    assert Allocation.objects.get(pk=alloc.pk).state == "terminating"  # still on gpu-a, being killed
    events = AllocationEvent.objects.filter(allocation=alloc)
    events.update(created_at=started)  # placed
    events.filter(Q(node_freed=True) | Q(to_state="terminating")).update(created_at=lost)  # gpu-b freed; killed
    spans = accounting.intervals(since=started, until=lost + timedelta(minutes=30))
    assert [(s.end - s.start, s.nodes, s.gpus) for s in spans] == [(timedelta(hours=1), 2, 8),
                                                                   (timedelta(minutes=30), 1, 4)]
