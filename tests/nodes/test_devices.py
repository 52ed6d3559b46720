"""The agent's GPU inventory (nodes/devices.py) through a fake NVML and a recorded nvidia-smi
output, and the hello/start fields that carry it (nodes/protocol.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nodes import devices
from nodes.protocol import BadFrame, Hello, parse
from tests.nodes.nvml_fake import FakeGPU, FakeNVML, gpus

RECORDED = Path(__file__).resolve().parent.parent / "fixtures" / "nvidia" / "smi-h100x8.csv"


def test_nvml_inventory_lists_indices_uuids_models_memory_and_mig():
    fake = FakeNVML([FakeGPU(uuid="GPU-a"), FakeGPU(uuid="GPU-b", name="NVIDIA A100-SXM4-40GB", memory_mib=40960,
                                                    mig=["MIG-b0", "MIG-b1"])])
    found = devices.discover(fake, smi=lambda: pytest.fail("nvidia-smi used while NVML works"))
    assert [(d["index"], d["uuid"], d["model"], d["memory_mib"]) for d in found] == [
        (0, "GPU-a", "NVIDIA H100 80GB HBM3", 81559), (1, "GPU-b", "NVIDIA A100-SXM4-40GB", 40960)]
    assert "mig" not in found[0]
    assert [m["uuid"] for m in found[1]["mig"]] == ["MIG-b0", "MIG-b1"]  # bytes from NVML decoded
    assert all(d["healthy"] for d in found)


def test_an_uncorrectable_ecc_error_or_pending_retirement_makes_a_gpu_unhealthy():
    fake = FakeNVML(gpus(3))
    fake.gpus[1].ecc_uncorrectable = 2
    fake.gpus[2].retired_pending = True
    assert [d["healthy"] for d in devices.discover(fake)] == [True, False, False]
    assert devices.health(fake)[1] == {"index": 1, "temperature_c": 40, "ecc_uncorrectable": 2,
                                       "retired_pending": False}


def test_without_nvml_nvidia_smi_is_parsed_and_without_either_it_is_a_cpu_node(monkeypatch):
    monkeypatch.setattr(devices, "load_nvml", lambda: None)
    found = devices.discover(smi=lambda: RECORDED.read_text())
    assert [d["index"] for d in found] == list(range(8))
    assert found[3] == {"index": 3, "uuid": "GPU-6f2b1c0e-8a3d-4f0e-9b1a-1c2d3e4f5a63",
                        "model": "NVIDIA H100 80GB HBM3", "memory_mib": 81559, "healthy": True}
    assert devices.discover(smi=lambda: None) == []


def test_nvidia_smi_lines_it_does_not_understand_are_skipped_and_commas_in_names_kept():
    text = "0, GPU-x, NVIDIA, Special, 1024\ngarbage\n1, GPU-y, Tesla T4, [N/A]\n"
    assert devices.parse_smi_csv(text) == [
        {"index": 0, "uuid": "GPU-x", "model": "NVIDIA, Special", "memory_mib": 1024, "healthy": True}]


def test_a_process_sees_only_its_bound_devices_and_none_without_any():
    env = devices.visible_env([{"index": 2, "uuid": "GPU-c"}, {"index": 5, "uuid": "GPU-f"}])
    assert env == {"CUDA_VISIBLE_DEVICES": "GPU-c,GPU-f", "NVIDIA_VISIBLE_DEVICES": "GPU-c,GPU-f"}
    assert devices.visible_env([]) == {"CUDA_VISIBLE_DEVICES": "", "NVIDIA_VISIBLE_DEVICES": "void"}


def _hello(**extra):
    return json.dumps({"type": "hello", "id": "h1", "agent_version": "1", "capacity": {}, "labels": {},
                       "running": [], **extra})


def test_hello_carries_devices_optionally():
    assert parse(_hello()) == Hello(id="h1", agent_version="1", capacity={}, labels={}, running=[])
    found = devices.discover(FakeNVML(gpus(2)))
    frame = parse(_hello(devices=found, cgroups=False))
    assert isinstance(frame, Hello) and frame.devices == found and frame.cgroups is False


@pytest.mark.parametrize("bad", [
    [{"index": 0, "uuid": "GPU-a", "model": "m"}],  # memory missing
    [{"index": 0, "uuid": "GPU-a", "model": "m", "memory_mib": 1, "extra": 1}],
    [{"index": True, "uuid": "GPU-a", "model": "m", "memory_mib": 1}],
    [{"index": -1, "uuid": "GPU-a", "model": "m", "memory_mib": 1}],
    [{"index": 0, "uuid": "x" * 129, "model": "m", "memory_mib": 1}],
    [{"index": 0, "uuid": "GPU-a", "model": "m", "memory_mib": 1, "mig": [{"profile": "1g"}]}],
    [{"index": 0, "uuid": "GPU-a", "model": "m", "memory_mib": 1}] * 2,  # the same index twice
    # one uuid twice: two allocations bound to indices 0 and 1 would share one GPU
    [{"index": 0, "uuid": "GPU-a", "model": "m", "memory_mib": 1},
     {"index": 1, "uuid": "GPU-a", "model": "m", "memory_mib": 1}],
    [{"index": 0, "uuid": "GPU-a", "model": "m", "memory_mib": 1, "mig": [{"uuid": "MIG-x"}, {"uuid": "MIG-x"}]}],
    [{"index": 0, "uuid": "GPU-a", "model": "m", "memory_mib": 1, "mig": [{"uuid": "GPU-b"}]},
     {"index": 1, "uuid": "GPU-b", "model": "m", "memory_mib": 1}],
    ["GPU-a"],
    [{"index": 0, "uuid": "", "model": "m", "memory_mib": 1}],  # a start names devices by uuid
    [{"index": 0, "uuid": "GPU-a", "model": "m", "memory_mib": 1, "mig": [{"uuid": " "}]}],
])
def test_malformed_devices_are_a_bad_frame(bad):
    with pytest.raises(BadFrame):
        parse(_hello(devices=bad))
