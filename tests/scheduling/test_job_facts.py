"""A job's page says where and what it runs and what it has used: group, vCluster, session type,
command, nodes, times, and GPU-hours as the accounting bills them, worked out here by hand."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from scheduling.models import AllocationEvent, SessionType

pytestmark = pytest.mark.django_db


def _fact(html: str, name: str) -> str:
    m = re.search(rf"<dt>{name}</dt><dd[^>]*>(.*?)</dd>", html, re.S)
    return " ".join(re.sub(r"<[^>]+>", "", m.group(1)).split()) if m else ""


def test_the_job_page_lists_its_facts_and_gpu_hours(client, tenant_physics, resource_group, vcluster_hpc,
                                                    node_gpu_a, make_allocation):
    now = timezone.now()
    session = SessionType.objects.create(resource_group=resource_group, name="batch")
    job = make_allocation(state="running", node_count=1, per_node_gpu=4, vcluster=vcluster_hpc, session_type=session,
                          command=["python", "train.py", "--epochs", "3"], submitted_at=now - timedelta(hours=3),
                          started_at=now - timedelta(minutes=30), ran_on=["gpu-a"])
    job.placements.create(node=node_gpu_a, gpu=4)
    # Ran 1 h, was preempted and suspended for 1 h, running again for the last 30 min.
    for to_state, ago in (("pending", 180), ("running", 150), ("checkpointing", 95), ("suspended", 90),
                          ("pending", 90), ("running", 30)):
        event = AllocationEvent.objects.create(allocation=job, to_state=to_state)
        AllocationEvent.objects.filter(pk=event.pk).update(created_at=now - timedelta(minutes=ago))
    client.force_login(tenant_physics.memberships.first().user)
    html = client.get(f"/jobs/{job.pk}/").content.decode()
    read = (timezone.now() - now).total_seconds()  # at most this long between the events and the page
    assert _fact(html, "group") == "rg-main" and _fact(html, "vCluster") == "hpc"
    assert _fact(html, "session type") == "batch"
    assert _fact(html, "command") == "python train.py --epochs 3"
    assert _fact(html, "nodes") == "gpu-a"
    # By hand: held 150 -> 90 min ago (60 min) and the last 30 min: 1.5 h x 4 GPUs = 6 GPU-hours,
    # plus the time between building the events and the page (to three places).
    assert 6.0 <= float(_fact(html, "GPU-hours used")) <= 6.0 + 4 * read / 3600 + 0.0005
    assert re.fullmatch(r"30m \d\ds", _fact(html, "elapsed"))
    assert 'id="job-facts" data-live-refresh="/jobs/' in html
