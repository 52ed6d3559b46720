"""GPU health that did not change what it judges (nodes/health.py health_key, node_gpu_readings):
stored in one statement that keeps the Xids already told, with nothing judged or audited; a
report the key tells apart is judged in full. The consumer's use of it over a real Daphne is in
test_health.py (a real agent's ECC error)."""

from __future__ import annotations

import pytest

from nodes.health import health_key, node_gpu_health, node_gpu_readings
from nodes.models import Node
from scheduling.models import PolicyChange


def _report(**per_gpu):
    return [{"index": i, "temperature_c": 40, "ecc_uncorrectable": 0, "retired_pending": False,
             **per_gpu.get(f"g{i}", {})} for i in range(4)]


def test_the_key_keeps_what_is_judged_and_leaves_out_the_degrees():
    assert health_key(_report(), 90) == health_key(_report(g1={"temperature_c": 77}), 90)
    assert health_key(_report(), 90) != health_key(_report(g1={"temperature_c": 91}), 90)
    assert health_key(_report(), 90) != health_key(_report(g2={"ecc_uncorrectable": 1}), 90)
    assert health_key(_report(), 90) != health_key(_report(g0={"xid": [79]}), 90)
    assert health_key(list(reversed(_report())), 90) == health_key(_report(), 90)


@pytest.mark.postgres
@pytest.mark.django_db
def test_readings_are_stored_with_the_xids_already_told_and_nothing_judged(node_gpu_a):
    node_gpu_health(node=node_gpu_a, gpus=_report(g1={"xid": [13]}))  # 13: not a critical Xid by default
    audits = PolicyChange.objects.count()
    limit = node_gpu_readings(node_id=node_gpu_a.pk, gpus=_report(g1={"temperature_c": 55}, g3={"temperature_c": 61}))
    assert limit == 90
    node = Node.objects.get(pk=node_gpu_a.pk)
    assert node.gpu_health == [{"index": 0, "temperature_c": 40, "ecc_uncorrectable": 0, "retired_pending": False},
                               {"index": 1, "temperature_c": 55, "ecc_uncorrectable": 0, "retired_pending": False,
                                "xid": [13]},
                               {"index": 2, "temperature_c": 40, "ecc_uncorrectable": 0, "retired_pending": False},
                               {"index": 3, "temperature_c": 61, "ecc_uncorrectable": 0, "retired_pending": False}]
    assert (node.state, node.health_reason) == ("ready", "") and PolicyChange.objects.count() == audits


@pytest.mark.postgres
@pytest.mark.django_db
def test_a_report_with_xids_or_a_moved_limit_is_left_to_the_full_judgement(node_gpu_a):
    assert node_gpu_readings(node_id=node_gpu_a.pk, gpus=_report(g0={"xid": [79]})) is None
    assert Node.objects.get(pk=node_gpu_a.pk).gpu_health == []  # nothing written
    Node.objects.filter(pk=node_gpu_a.pk).update(gpu_max_temperature_c=70)  # as an operator's edit
    assert node_gpu_readings(node_id=node_gpu_a.pk, gpus=_report()) == 70
