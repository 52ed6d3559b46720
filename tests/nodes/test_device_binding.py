"""GPUs reported at hello, stored per node, and bound per placement on PostgreSQL: never one
device to two live allocations, however the starts race."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, connection, transaction

from nodes import devices
from nodes.actions import node_hello
from nodes.models import Node, NodeDevice
from nodes.protocol import Hello
from scheduling.actions.starts import allocation_place
from scheduling.errors import Conflict
from scheduling.models import Allocation, Placement, PlacementDevice, PolicyChange
from scheduling.passes.run import schedule_pass
from tests.nodes.nvml_fake import FakeNVML, gpus
from tests.scheduling.test_concurrency import _in_threads

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def _hello(node, found):
    return node_hello(node=node, frame=Hello(id="h", agent_version="1", capacity={}, labels={}, running=[],
                                             devices=found, cgroups=False))


def test_hello_stores_devices_and_a_mismatch_is_audited_not_applied_to_capacity(node_gpu_a):
    fake = FakeNVML(gpus(8))
    fake.gpus[6].ecc_uncorrectable = 1
    fake.gpus = fake.gpus[:7]  # seven found, one of them unhealthy
    _hello(node_gpu_a, devices.discover(fake))
    node = Node.objects.get(pk=node_gpu_a.pk)
    assert list(NodeDevice.objects.filter(node=node).values_list("index", "healthy")) == [
        (i, i != 6) for i in range(7)]
    assert (node.gpu, node.gpu_healthy, node.usable_gpu) == (8, 6, 6)
    assert "7 GPU(s), 6 healthy; 8 registered" in node.device_mismatch
    entry = PolicyChange.objects.get(action="device_mismatch", target_id=str(node.pk))
    assert entry.after == {"device_mismatch": node.device_mismatch}
    _hello(node, devices.discover(FakeNVML(gpus(8))))  # repaired: the mismatch clears, audited too
    node.refresh_from_db()
    assert (node.gpu_healthy, node.device_mismatch) == (8, "")
    assert PolicyChange.objects.filter(action="device_mismatch", target_id=str(node.pk)).count() == 2
    _hello(node, None)  # an agent that does not report devices: unknown, nothing bound
    node.refresh_from_db()
    assert (node.gpu_healthy, NodeDevice.objects.filter(node=node).count()) == (None, 0)


def test_a_node_with_fewer_healthy_gpus_takes_no_work_beyond_them(node_gpu_a, make_allocation, vcluster_hpc):
    fake = FakeNVML(gpus(8))
    for gpu in fake.gpus[4:]:
        gpu.retired_pending = True
    _hello(node_gpu_a, devices.discover(fake))
    fits = make_allocation(state="pending", node_count=1, per_node_gpu=4, vcluster=vcluster_hpc)
    waits = make_allocation(state="pending", node_count=1, per_node_gpu=1, vcluster=vcluster_hpc)
    schedule_pass(node_gpu_a.resource_group_id)
    assert Allocation.objects.get(pk=fits.pk).state == "running"
    assert Allocation.objects.get(pk=waits.pk).state == "pending"
    assert sorted(PlacementDevice.objects.values_list("index", flat=True)) == [0, 1, 2, 3]


def test_one_pass_binds_each_allocation_its_own_devices(node_gpu_a, make_allocation, vcluster_hpc):
    assert connection.vendor == "postgresql"
    _hello(node_gpu_a, devices.discover(FakeNVML(gpus(8))))
    jobs = [make_allocation(state="pending", node_count=1, per_node_gpu=n, vcluster=vcluster_hpc) for n in (3, 1, 4)]
    schedule_pass(node_gpu_a.resource_group_id)
    held = {j.pk: sorted(PlacementDevice.objects.filter(placement__allocation=j).values_list("index", flat=True))
            for j in jobs}
    assert [len(held[j.pk]) for j in jobs] == [3, 1, 4]
    assert sorted(i for indices in held.values() for i in indices) == list(range(8))
    uuids = set(PlacementDevice.objects.values_list("uuid", flat=True))
    assert uuids == set(NodeDevice.objects.values_list("uuid", flat=True))


def test_racing_starts_never_bind_one_device_twice(node_gpu_a, make_allocation, vcluster_hpc):
    _hello(node_gpu_a, devices.discover(FakeNVML(gpus(8))))
    jobs = [make_allocation(state="pending", node_count=1, per_node_gpu=1, vcluster=vcluster_hpc) for _ in range(8)]
    ids = {"gpu-a": node_gpu_a.pk}

    def race(i: int):
        if i < 2:  # two passes at once (one holds the group's lock), and direct starts beside them
            return schedule_pass(node_gpu_a.resource_group_id)
        return [allocation_place(allocation=j, node_ids=ids, nodes=["gpu-a"], borrowed=[]) for j in jobs[i - 2::6]]

    results = _in_threads(8, race)
    refused = [r for r in results if isinstance(r, Exception)]
    # A start that lost a race is refused whole (the device taken, or the job started meanwhile).
    assert all(isinstance(r, IntegrityError | Conflict) for r in refused), refused
    bound = list(PlacementDevice.objects.values_list("node_id", "index"))
    assert len(bound) == len(set(bound))
    for p in Placement.objects.filter(allocation__state="running"):
        assert p.devices.count() == p.gpu  # every started allocation got all its GPUs
    # And the database itself refuses a second holder of a bound device.
    taken = PlacementDevice.objects.first()
    other = Placement.objects.exclude(pk=taken.placement_id).first()
    assert other is not None
    with pytest.raises(IntegrityError), transaction.atomic():
        PlacementDevice.objects.create(placement=other, node_id=taken.node_id, index=taken.index, uuid=taken.uuid)
