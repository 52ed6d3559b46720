"""The console follows the cluster without a reload: a node heard from again and a job started
change its tile, its group's counts and the attention panel; feed lines are words, filtered and
paused."""

from __future__ import annotations

import json
import urllib.request

import pytest
from playwright.sync_api import expect
from websockets.sync.client import connect

from nodes.actions import agent_token_issue
from nodes.models import Node
from scheduling.actions.tokens import api_token_issue
from scheduling.models import ResourceGroup

pytestmark = [pytest.mark.browser, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def _agent_says(live_server_url: str, node: Node, frame: dict) -> dict:
    """One frame from the node's agent, over its real socket; the server's answer."""
    token = agent_token_issue(node=node)
    url = live_server_url.replace("http://", "ws://") + "/ws/agent/"
    with connect(url, additional_headers={"Authorization": f"Bearer {token}"}) as ws:
        ws.send(json.dumps(frame))
        return json.loads(ws.recv(timeout=10))


def _heartbeat(live_server_url: str, node: Node) -> dict:
    return _agent_says(live_server_url, node, {"type": "heartbeat", "id": "hb-1", "seq": 1, "running": []})


def _post(live_server_url: str, user, path: str, body: dict) -> tuple[int, dict]:
    """A REST post as ``user`` (an API token of theirs): the status and the answer."""
    token = api_token_issue(user=user)
    request = urllib.request.Request(f"{live_server_url}{path}", data=json.dumps(body).encode(),
                                     method="POST", headers={"Content-Type": "application/json",
                                                             "Authorization": f"Token {token}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.status, json.loads(response.read())


def _submit(live_server_url: str, user, body: dict) -> int:
    status, answer = _post(live_server_url, user, "/api/v1/allocations/", body)
    assert status == 201
    return int(answer["id"])


def test_tiles_counts_and_attention_follow_a_heartbeat_and_a_decision(login, live_server_url, operator,
                                                                      resource_group, vcluster_hpc, node_gpu_a,
                                                                      tenant_physics):
    Node.objects.filter(pk=node_gpu_a.pk).update(state="degraded")  # silent for a while, as the sweep marks it
    page = login("op", "pw-op-123")
    page.goto(f"{live_server_url}/ops/")
    page.wait_for_function("document.body.dataset.live === 'on'", timeout=10_000)
    tile = page.locator("#cluster-state a.tile[data-node='gpu-a']")
    row = page.locator("#cluster-state tr.group-row[data-group='rg-main']")
    expect(tile).to_have_attribute("data-kind", "degraded")
    expect(row.locator(".node-counts")).to_have_text("1 degraded")
    expect(page.locator("#attention .attention-nodes li[data-node='gpu-a']")).to_contain_text("degraded")
    page.evaluate("window.loadedOnce = true")  # gone if the page were reloaded

    # The agent is heard from again: ready and idle, without a reload.
    assert _heartbeat(live_server_url, node_gpu_a) == {"type": "ack", "id": "hb-1"}
    expect(tile).to_have_attribute("data-kind", "idle", timeout=15_000)
    expect(tile.locator(".gpus")).to_have_text("0/8 GPU")
    expect(row.locator(".node-counts")).to_have_text("1 ready")
    expect(page.locator("#attention .attention-nodes")).to_have_count(0)
    expect(page.locator("#live-feed li[data-kind='node']").first).to_contain_text("rg-main: node gpu-a is ready")

    # A job of the whole node is decided and started: the tile is full, the group's work counted.
    alice = tenant_physics.memberships.first().user
    job = _submit(live_server_url, alice, {"resource_group": "rg-main", "vcluster": "hpc", "per_node": {"gpu": 8},
                                           "preemption_class": 3, "command": ["sleep", "60"]})
    expect(tile).to_have_attribute("data-kind", "full", timeout=15_000)
    expect(tile.locator(".gpus")).to_have_text("8/8 GPU")
    expect(row.locator(".gpus-used")).to_have_text("8/8")
    expect(row.locator(".work-counts")).to_have_text("1 running")
    started = page.locator(f"#live-feed li[data-kind='job']:has(a[href='/jobs/{job}/'])").first
    expect(started).to_contain_text(f"#{job} (physics, 1 × 8 GPU)")
    assert page.evaluate("window.loadedOnce") is True


def test_feed_lines_filter_by_group_and_kind_and_wait_while_paused(login, live_server_url, operator,
                                                                   resource_group, vcluster_hpc, node_gpu_a,
                                                                   tenant_physics):
    ResourceGroup.objects.create(name="rg-other", policy={"kind": "class_cost"})
    Node.objects.filter(pk=node_gpu_a.pk).update(state="degraded")
    page = login("op", "pw-op-123")
    page.goto(f"{live_server_url}/ops/")
    page.wait_for_function("document.body.dataset.live === 'on'", timeout=10_000)
    feed = page.locator("#live-feed")

    page.click("#feed-pause")
    _heartbeat(live_server_url, node_gpu_a)
    expect(page.locator("#feed-waiting")).to_have_text("1 new while paused", timeout=15_000)
    expect(feed.locator("li[data-kind='node']")).to_have_count(0)
    expect(page.locator("#cluster-state a.tile[data-node='gpu-a']")).to_have_attribute("data-kind", "idle")
    page.click("#feed-pause")  # resume: the line that waited appears
    expect(feed.locator("li[data-kind='node']")).to_have_count(1)
    expect(page.locator("#feed-waiting")).to_have_text("")

    page.select_option("#feed-group", "rg-other")
    expect(feed.locator("li[data-kind='node']")).to_be_hidden()
    page.select_option("#feed-group", "rg-main")
    expect(feed.locator("li[data-kind='node']")).to_be_visible()
    page.select_option("#feed-kind", "decision")
    expect(feed.locator("li[data-kind='node']")).to_be_hidden()
    page.select_option("#feed-kind", "node")
    expect(feed.locator("li[data-kind='node']")).to_be_visible()


def test_the_feed_says_a_cancel_of_running_work_was_asked_until_its_agent_reports_it_gone(
        login, live_server_url, operator, resource_group, vcluster_hpc, node_gpu_a, tenant_physics):
    """Running work cancelled is terminating while its process may still run: the feed says the
    cancel was asked, not that the work is cancelled, until its agent reports the process gone."""
    page = login("op", "pw-op-123")
    page.goto(f"{live_server_url}/ops/")
    page.wait_for_function("document.body.dataset.live === 'on'", timeout=10_000)
    alice = tenant_physics.memberships.first().user
    job = _submit(live_server_url, alice, {"resource_group": "rg-main", "vcluster": "hpc", "per_node": {"gpu": 8},
                                           "command": ["sleep", "60"]})
    lines = page.locator(f"#live-feed li[data-kind='job']:has(a[href='/jobs/{job}/'])")
    expect(lines.first).to_contain_text(f"rg-main: started #{job} (physics, 1 × 8 GPU)", timeout=15_000)

    status, answer = _post(live_server_url, alice, f"/api/v1/allocations/{job}/cancel/", {})
    assert status == 200 and answer["state"] == "terminating"
    expect(lines.first).to_contain_text(f"rg-main: #{job} (physics, 1 × 8 GPU) cancel asked (terminating)",
                                        timeout=15_000)
    expect(lines.filter(has_text="is cancelled")).to_have_count(0)

    assert _agent_says(live_server_url, node_gpu_a, {"type": "exited", "id": "x-1", "allocation": str(job),
                                                     "exit_code": -15, "reason": "terminated"}) == {
        "type": "ack", "id": "x-1"}
    expect(lines.first).to_contain_text(f"rg-main: #{job} (physics, 1 × 8 GPU) is cancelled", timeout=15_000)
    expect(lines.filter(has_text="cancel asked (terminating)")).to_have_count(1)
