"""The console's cluster fragment (/ops/ and /ops/state/): tiles coloured by what each node holds,
GPUs used per group, and the attention panel, each case set up by hand."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from nodes.models import Node, NodeDevice
from scheduling.models import ResourceGroup, TenantShare

pytestmark = pytest.mark.django_db


def _tiles(html: str) -> dict[str, tuple[str, str]]:
    """node -> (kind, "used/gpus") as the tiles say it."""
    out = {}
    for m in re.finditer(r'<a class="tile [^"]*" href="[^"]*" data-node="([\w-]+)" data-kind="(\w+)" '
                         r'data-used="(\d+)" data-gpus="(\d+)"', html):
        out[m.group(1)] = (m.group(2), f"{m.group(3)}/{m.group(4)}")
    return out


def _section(html: str, cls: str) -> str:
    m = re.search(rf'<ul class="{cls}">(.*?)</ul>', html, re.S)
    return " ".join(re.sub(r"<[^>]+>", "", m.group(1)).split()) if m else ""


def test_tiles_say_what_each_node_holds(client, operator, resource_group, vcluster_hpc, make_allocation):
    def node(name, state="ready", gpu=8):
        return Node.objects.create(name=name, resource_group=resource_group, vcluster=vcluster_hpc, gpu=gpu,
                                   cpu=64, memory=512, state=state)

    idle, partly, full, held = node("n-idle"), node("n-partly"), node("n-full"), node("n-held")
    node("n-drain", "draining"), node("n-degraded", "degraded"), node("n-down", "down"), node("n-new", "unknown")
    make_allocation(state="running", node_count=1, per_node_gpu=2).placements.create(node=partly, gpu=2)
    make_allocation(state="running", node_count=1, per_node_gpu=8).placements.create(node=full, gpu=8)
    make_allocation(state="pending", node_count=1, per_node_gpu=8).placements.create(node=held, kind="held")
    client.force_login(operator)
    html = client.get("/ops/state/").content.decode()
    assert _tiles(html) == {
        "n-idle": ("idle", "0/8"), "n-partly": ("partly", "2/8"), "n-full": ("full", "8/8"),
        "n-held": ("held", "0/8"), "n-drain": ("draining", "0/8"), "n-degraded": ("degraded", "0/8"),
        "n-down": ("down", "0/8"), "n-new": ("down", "0/8")}
    assert 'class="tile partly level-1"' in html  # 2 of 8: the first quarter of the scale
    # GPUs used of the GPUs of nodes not down: 10 of 6 nodes x 8.
    assert re.search(r'<td class="gpus-used">10/48</td>', html)
    legend = re.search(r'<ul class="legend"[^>]*>(.*?)</ul>', html, re.S).group(1)
    assert [w.strip() for w in re.findall(r"</span>([^<]+)</li>", legend)] == [
        "idle", "partly used", "full", "held for a preemptor", "draining", "degraded", "down"]
    assert idle.pk  # (idle is the node with nothing on it)


def test_a_group_page_has_the_same_tiles_and_legend_for_its_own_nodes_with_their_work(
        client, operator, resource_group, vcluster_hpc, make_allocation):
    other = ResourceGroup.objects.create(name="rg-other", policy={"kind": "priority"})
    Node.objects.create(name="n-elsewhere", resource_group=other, gpu=8, state="ready")
    partly = Node.objects.create(name="n-partly", resource_group=resource_group, vcluster=vcluster_hpc, gpu=8,
                                 state="ready")
    Node.objects.create(name="n-drain", resource_group=resource_group, gpu=4, state="draining")
    job = make_allocation(state="running", node_count=1, per_node_gpu=6)
    job.placements.create(node=partly, gpu=6)
    client.force_login(operator)
    html = client.get("/ops/groups/rg-main/").content.decode()
    tiles = {m.group(1): (m.group(2), f"{m.group(3)}/{m.group(4)}") for m in re.finditer(
        r'<div class="tile [^"]*" data-node="([\w-]+)" data-kind="(\w+)" data-used="(\d+)" data-gpus="(\d+)"', html)}
    assert tiles == {"n-partly": ("partly", "6/8"), "n-drain": ("draining", "0/4")}
    assert 'class="tile partly level-3"' in html  # 6 of 8
    assert f'href="/jobs/{job.pk}/"' in html and "6 of 12 GPUs in use" in html
    legend = re.search(r'<ul class="legend"[^>]*>(.*?)</ul>', html, re.S).group(1)
    assert "held for a preemptor" in legend and "partly used" in legend


def test_attention_lists_what_an_operator_should_look_at(client, operator, resource_group, vcluster_hpc,
                                                         make_allocation, tenant_physics):
    client.force_login(operator)
    assert "Nothing: every node is up" in client.get("/ops/state/").content.decode()

    now = timezone.now()
    Node.objects.create(name="n-down", resource_group=resource_group, gpu=8, state="down")
    sick = Node.objects.create(name="n-sick", resource_group=resource_group, gpu=8, state="ready",
                               device_mismatch="1 GPU fewer than registered")
    NodeDevice.objects.create(node=sick, index=3, uuid="GPU-3", healthy=False)
    late = make_allocation(state="checkpointing", node_count=1, per_node_gpu=8, deadline_at=now - timedelta(minutes=2))
    make_allocation(state="checkpointing", node_count=1, per_node_gpu=8, deadline_at=now + timedelta(minutes=2))
    ResourceGroup.objects.create(name="rg-paused", policy={"kind": "priority"}, paused=True)
    fs = ResourceGroup.objects.create(name="rg-fs", policy={"kind": "fair_share", "starvation_timeout_s": 30})
    TenantShare.objects.create(tenant=tenant_physics, resource_group=fs, share=0.0, fair_share=0.5,
                               below_since=now - timedelta(seconds=45), updated_at=now)

    html = client.get("/ops/state/").content.decode()
    assert _section(html, "attention-nodes").startswith("n-down (rg-main) is down, never heard from")
    assert _section(html, "attention-checkpoints").startswith(f"#{late.pk} of physics in rg-main")
    assert f"#{late.pk + 1} " not in _section(html, "attention-checkpoints")  # not due yet
    assert _section(html, "attention-paused") == "rg-paused: preemption paused"
    assert _section(html, "attention-starving").startswith("physics in rg-fs: starving")
    assert _section(html, "attention-devices") == "n-sick: GPU 3 unhealthy (1 GPU fewer than registered)"
    assert '<span class="badge bad">5</span>' in html


def test_the_fragment_is_the_operators_only(client, tenant_physics, django_user_model):
    assert client.get("/ops/state/").status_code in (302, 403)
    client.force_login(django_user_model.objects.get(username="alice"))
    assert client.get("/ops/state/").status_code == 403


def test_the_console_s_first_feed_lines_name_whom_each_decision_preempted(client, operator, resource_group,
                                                                          make_allocation, tenant_chemistry):
    from scheduling.models import PreemptionDecision

    bob = tenant_chemistry.memberships.first().user
    victim = make_allocation(state="suspended", node_count=2, per_node_gpu=4)
    other = make_allocation(state="suspended", node_count=1, per_node_gpu=8, tenant=tenant_chemistry, user=bob)
    high = make_allocation(state="pending", node_count=1, per_node_gpu=8, tenant=tenant_chemistry, user=bob)
    PreemptionDecision.objects.create(
        resource_group=resource_group, preemptor=high, decided_for=timezone.now(), result="preempt",
        code="PREEMPT", explanation="x", outcome="executed",
        victims=[{"id": str(victim.pk), "reason": "priority", "action": "checkpoint"},
                 {"id": str(other.pk), "reason": "priority", "action": "checkpoint"}])
    client.force_login(operator)
    feed = re.search(r'<ul id="live-feed" class="feed">(.*?)</ul>', client.get("/ops/").content.decode(), re.S)
    line = " ".join(re.sub(r"<[^>]+>", "", feed.group(1)).split())
    assert (f"rg-main: #{high.pk} (chemistry, 1 × 8 GPU) preempted #{victim.pk} (physics, 2 × 4 GPU), "
            f"#{other.pk} (chemistry, 1 × 8 GPU)") in line
