"""GPU health in heartbeats (nodes/health.py): NVML's counters and Xid events through the fake
NVML, the node's thresholds (defaults, operator edits audited), Degraded with the reason on the
node page, in the audit log and the live feed, and an uncorrectable ECC error on a busy device
asking its work to checkpoint: through the actions, the API and a real agent over Daphne."""

from __future__ import annotations

import itertools
import json
import sys

import pytest

from nodes import devices
from nodes.actions import agent_token_issue, node_heartbeat, node_hello
from nodes.agent import Agent
from nodes.models import Node, NodeDevice
from nodes.protocol import BadFrame, Heartbeat, Hello, parse
from scheduling.models import Allocation, AllocationEvent, PolicyChange
from scheduling.passes.run import schedule_pass
from tests.nodes.nvml_fake import FakeGPU, FakeNVML, gpus
from tests.nodes.test_end_to_end import APP, wait_for
from tests.scheduling.batch_helpers import sent_fixture  # noqa: F401
from tests.scheduling.test_live import _delivered, _operator_and_member

_seq = itertools.count(1)


def _beat(**extra):
    return json.dumps({"type": "heartbeat", "id": "b1", "seq": 5, "running": [], **extra})


def test_heartbeats_carry_per_gpu_health_with_xids_and_malformed_health_is_a_bad_frame():
    frame = parse(_beat(gpus=[{"index": 0, "temperature_c": 41, "ecc_uncorrectable": 0, "retired_pending": False,
                               "xid": [79, 48]}]))
    assert isinstance(frame, Heartbeat) and frame.gpus[0]["xid"] == [79, 48]
    for bad in ([{"index": 0, "xid": [True]}], [{"index": 0, "xid": [-1]}], [{"index": 0, "xid": list(range(17))}],
                [{"index": 0, "xid": "79"}], [{"index": 0}, {"index": 0}], [{"index": 0, "power_w": 300}]):
        with pytest.raises(BadFrame):
            parse(_beat(gpus=bad))


def test_the_agent_reports_nvml_health_and_each_xid_once():
    fake = FakeNVML(gpus(2))
    fake.gpus[1].ecc_uncorrectable, fake.gpus[1].xid_pending = 3, [79]
    agent = Agent("ws://unused/", "t", workdir=__import__("pathlib").Path("/nonexistent"))
    agent.nvml = fake
    first = agent._gpu_health()
    assert first == [{"index": 0, "temperature_c": 40, "ecc_uncorrectable": 0, "retired_pending": False},
                     {"index": 1, "temperature_c": 40, "ecc_uncorrectable": 3, "retired_pending": False, "xid": [79]}]
    assert "xid" not in agent._gpu_health()[1]  # read once, reported once
    assert parse(json.dumps({"type": "heartbeat", "id": "h", "seq": 1, "running": [], "gpus": first}))
    assert Agent("ws://unused/", "t", workdir=__import__("pathlib").Path("/x"), simulate=True)._gpu_health() is None


def _health(node, **per_gpu):
    """A heartbeat from ``node``'s agent with eight GPUs, ``per_gpu`` {index: fields} changed."""
    reported = [{"index": i, "temperature_c": 40, "ecc_uncorrectable": 0, "retired_pending": False, **per_gpu.get(
        f"g{i}", {})} for i in range(8)]
    node_heartbeat(node=node, frame=Heartbeat(id=f"b{next(_seq)}", seq=next(_seq), running=[], gpus=reported))
    return Node.objects.get(pk=node.pk)


@pytest.fixture
def reporting(node_gpu_a):
    """gpu-a with eight reported devices, its agent just said hello."""
    node_hello(node=node_gpu_a, frame=Hello(id="h", agent_version="1", capacity={}, labels={}, running=[],
                                            devices=devices.discover(FakeNVML(gpus(8)))))
    return Node.objects.get(pk=node_gpu_a.pk)


@pytest.mark.django_db
def test_past_a_threshold_the_node_is_degraded_with_the_reason_until_back_within(reporting, client, operator):
    node = _health(reporting, g3={"temperature_c": 95})
    assert (node.state, node.health_reason) == ("degraded", "GPU 3 above 90 C")
    node = _health(node, g3={"temperature_c": 96})  # a heartbeat does not undo it, nor does a hello
    assert node.state == "degraded"
    node_hello(node=node, frame=Hello(id="h2", agent_version="1", capacity={}, labels={}, running=[],
                                      devices=devices.discover(FakeNVML(gpus(8)))))
    assert Node.objects.get(pk=node.pk).state == "degraded"
    client.force_login(operator)
    page = client.get("/ops/nodes/gpu-a/").content.decode()
    assert "Degraded: GPU 3 above 90 C" in page and "<td>96 C</td>" in page  # the latest temperature
    node = _health(node)
    assert (node.state, node.health_reason) == ("ready", "")
    audit = list(PolicyChange.objects.filter(action="gpu_health").order_by("id").values_list("after", flat=True))
    assert audit == [{"health_reason": "GPU 3 above 90 C", "state": "degraded"},
                     {"health_reason": "", "state": "ready"}]


@pytest.mark.django_db
def test_ecc_retirement_and_critical_xids_degrade_by_default_and_xids_stay_until_cleared(reporting, client,
                                                                                          operator):
    node = _health(reporting, g1={"retired_pending": True}, g5={"xid": [13, 79]})  # 13: the application's
    assert node.health_reason == "GPU 1: retired pages pending a reset; GPU 5: Xid 79"
    node = _health(node)  # the pending retirement is dealt with; the Xid is remembered
    assert node.health_reason == "GPU 5: Xid 79" and node.gpu_health[5]["xid"] == [13, 79]
    client.force_login(operator)
    done = client.post("/api/v1/nodes/gpu-a/clear-xids/", {"reason": "GPU 5 reseated"},
                       content_type="application/json")
    assert done.status_code == 200 and done.json()["health_reason"] == "" and done.json()["state"] == "ready"
    assert PolicyChange.objects.filter(action="clear_xids", reason="GPU 5 reseated").exists()


@pytest.mark.django_db
def test_operators_set_thresholds_audited_and_the_node_is_judged_again(reporting, client, operator,
                                                                        tenant_physics):
    node = _health(reporting, g0={"temperature_c": 92, "ecc_uncorrectable": 0})
    assert node.state == "degraded"
    url = "/api/v1/nodes/gpu-a/gpu-thresholds/"
    client.force_login(tenant_physics.memberships.first().user)
    assert client.post(url, {"gpu_max_temperature_c": 99, "reason": "x"},
                       content_type="application/json").status_code == 403
    client.force_login(operator)
    for body, field in (({"gpu_max_temperature_c": -1, "reason": "x"}, "gpu_max_temperature_c"),
                        ({"gpu_xids": "48;79", "reason": "x"}, "gpu_xids"),
                        ({"gpu_max_temperature_c": 95}, "reason"),
                        ({"gpu_max_temp": 95, "reason": "x"}, "gpu_max_temp")):
        refused = client.post(url, body, content_type="application/json")
        assert refused.status_code == 400 and field in refused.json(), (body, refused.content)
    assert not PolicyChange.objects.filter(action="gpu_thresholds").exists()
    done = client.post(url, {"gpu_max_temperature_c": 95, "gpu_xids": "79", "reason": "these run hot"},
                       content_type="application/json")
    assert done.status_code == 200, done.content
    assert (done.json()["state"], done.json()["health_reason"], done.json()["gpu_xids"]) == ("ready", "", "79")
    entry = PolicyChange.objects.get(action="gpu_thresholds")
    assert (entry.before["gpu_max_temperature_c"], entry.after["gpu_max_temperature_c"]) == (90, 95)
    assert "above 95 C" in client.get("/ops/nodes/gpu-a/").content.decode()


@pytest.mark.django_db
def test_a_new_ecc_error_on_a_busy_gpu_asks_its_work_to_checkpoint(reporting, sent, make_allocation, vcluster_hpc,
                                                                   django_capture_on_commit_callbacks):
    saves = make_allocation(state="pending", node_count=1, per_node_gpu=4, checkpoint="auto", vcluster=vcluster_hpc)
    cannot = make_allocation(state="pending", node_count=1, per_node_gpu=4, vcluster=vcluster_hpc)
    with django_capture_on_commit_callbacks(execute=True):
        schedule_pass(reporting.resource_group_id)
    one, other = (a.placements.get().devices.order_by("index").first().index for a in (saves, cannot))
    with django_capture_on_commit_callbacks(execute=True):
        node = _health(reporting, **{f"g{one}": {"ecc_uncorrectable": 1}, f"g{other}": {"ecc_uncorrectable": 2}})
    assert node.state == "degraded" and f"GPU {one}: 1 uncorrectable ECC error(s)" in node.health_reason
    assert Allocation.objects.get(pk=saves.pk).state == "checkpointing"
    assert AllocationEvent.objects.filter(allocation=saves, reason__endswith="asked to checkpoint now").exists()
    assert [f["allocation"] for _, f in sent.frames if f["type"] == "checkpoint"] == [str(saves.pk)]
    assert Allocation.objects.get(pk=cannot.pk).state == "running"  # no checkpoint to take: it goes on
    assert AllocationEvent.objects.filter(allocation=cannot, reason__endswith="keeps running").exists()
    # The failing devices are not bound again, and the same count reported again asks nothing more.
    assert sorted(NodeDevice.objects.filter(node=node, healthy=False).values_list("index", flat=True)) == sorted(
        [one, other])
    assert node.gpu_healthy == 6
    with django_capture_on_commit_callbacks(execute=True):
        _health(node, **{f"g{one}": {"ecc_uncorrectable": 1}, f"g{other}": {"ecc_uncorrectable": 2}})
    assert AllocationEvent.objects.filter(allocation=cannot, reason__endswith="keeps running").count() == 1


@pytest.mark.django_db(transaction=True)
def test_the_live_feed_tells_operators_not_tenants(reporting, client, operator, django_user_model, tenant_physics):
    got_ops, _ = _delivered(_operator_and_member(client, operator, django_user_model),
                            lambda: _health(reporting, g2={"temperature_c": 99}), 1, 0)
    assert got_ops == [{"kind": "node.health", "node": "gpu-a", "state": "degraded",
                        "reason": "GPU 2 above 90 C"}]


@pytest.mark.postgres
@pytest.mark.redis
@pytest.mark.django_db(transaction=True)
def test_a_real_agent_reports_an_ecc_error_and_the_job_on_that_gpu_checkpoints(
        tmp_path, resource_group, vcluster_hpc, node_gpu_a, make_allocation, agent_factory):
    app = tmp_path / "app.py"
    app.write_text(APP)
    nvml = tmp_path / "gpus.json"
    fleet = [FakeGPU(uuid=f"GPU-ecc-{i}").__dict__ for i in range(8)]
    nvml.write_text(json.dumps(fleet))
    agent_factory(agent_token_issue(node=node_gpu_a), env={"FAKE_NVML_FILE": str(nvml)})
    wait_for(lambda: node_gpu_a.devices.count() == 8, 30, "the agent's hello with its devices")
    job = make_allocation(state="pending", node_count=1, per_node_gpu=2, checkpoint="auto", vcluster=vcluster_hpc,
                          command=[sys.executable, str(app), "600"])
    schedule_pass(resource_group.pk)
    wait_for(lambda: AllocationEvent.objects.filter(allocation=job, reason__startswith="started on").exists(), 30,
             "the job to start")
    index = job.placements.get().devices.order_by("index").first().index
    fleet[index]["ecc_uncorrectable"] = 1
    nvml.write_text(json.dumps(fleet))
    # The next heartbeat (every 10 s) carries it: the job checkpoints and goes back to the queue.
    wait_for(lambda: Allocation.objects.get(pk=job.pk).state == "pending", 40, "the job to checkpoint")
    assert Allocation.objects.get(pk=job.pk).resume_from_checkpoint
    node = Node.objects.get(pk=node_gpu_a.pk)
    assert node.state == "degraded" and f"GPU {index}: 1 uncorrectable ECC error(s)" in node.health_reason
    assert not NodeDevice.objects.get(node=node, index=index).healthy


@pytest.mark.django_db
def test_thresholds_edited_in_the_admin_are_audited_and_judged_at_once(reporting, client, django_user_model):
    node = _health(reporting, g4={"temperature_c": 93})
    assert node.state == "degraded"
    client.force_login(django_user_model.objects.create_superuser("root", password="pw-root-123"))
    form = {"name": "gpu-a", "resource_group": node.resource_group_id, "vcluster": node.vcluster_id,
            "gpu": 8, "cpu": 64, "memory": 512, "labels": "{}", "state": node.state,
            "gpu_max_temperature_c": 95, "gpu_max_ecc_uncorrectable": 0, "gpu_retired_pending_degrades": "on",
            "gpu_xids": "48,79", "change_reason": "this rack runs hot"}
    done = client.post(f"/admin/nodes/node/{node.pk}/change/", form)
    assert done.status_code == 302, done.content.decode()[:2000]
    node = Node.objects.get(pk=node.pk)
    assert (node.gpu_max_temperature_c, node.gpu_xids, node.state, node.health_reason) == (95, "48,79", "ready", "")
    assert list(PolicyChange.objects.filter(reason="this rack runs hot").order_by("id").values_list("action", flat=True)) == [
        "edit", "gpu_health"]
    bad = client.post(f"/admin/nodes/node/{node.pk}/change/", {**form, "gpu_xids": "48 and 79"})
    assert bad.status_code == 200 and Node.objects.get(pk=node.pk).gpu_xids == "48,79"
