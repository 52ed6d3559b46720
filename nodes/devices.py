"""The node's GPUs as the agent sees them: inventory, health, and what each allocation may see.

Discovery goes through NVML (``pynvml``, from the nvidia-ml-py package, imported only when it is
installed); without it, through ``nvidia-smi --query-gpu=index,uuid,name,memory.total
--format=csv,noheader,nounits``; neither: a CPU node (no devices). A device is reported as
``{index, uuid, model, memory_mib, healthy, mig?}``, where ``mig`` lists its MIG instances
(``{uuid, memory_mib?}``) when MIG mode is on. Health (NVML only) is per device
``{index, temperature_c?, ecc_uncorrectable?, retired_pending?}``: the volatile uncorrectable ECC
count and whether retired pages wait for a reset, and ``xid``, the critical Xid events NVML
delivered since the previous heartbeat (where it can: ``xid_watch``). A device with an
uncorrectable ECC error or pages pending retirement is reported unhealthy.

Imports nothing of Django: it runs on compute nodes.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import shutil
import subprocess
from collections.abc import Callable
from typing import Any

log = logging.getLogger("lattice.agent")
SMI_QUERY = ["--query-gpu=index,uuid,name,memory.total", "--format=csv,noheader,nounits"]
MAX_XIDS = 16  # nodes/protocol.py


def load_nvml() -> Any | None:
    """The pynvml module, initialised, or None where it is not installed or finds no driver."""
    try:
        nvml = importlib.import_module("pynvml")
    except ImportError:
        return None
    try:
        nvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded...: a node without a driver
        log.info("NVML unavailable: %s", exc)
        return None
    return nvml


def run_nvidia_smi() -> str | None:
    """nvidia-smi's CSV inventory, or None where it is missing or fails."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        done = subprocess.run([smi, *SMI_QUERY], capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.warning("nvidia-smi failed: %s", exc)
        return None
    return done.stdout if done.returncode == 0 else None


def discover(nvml: Any | None = None, smi: Callable[[], str | None] = run_nvidia_smi) -> list[dict[str, Any]]:
    """The node's GPUs (empty on a CPU node). ``nvml``: an initialised pynvml-like module (tests
    inject a fake one); None loads the real one if present, then falls back to nvidia-smi."""
    nvml = nvml if nvml is not None else load_nvml()
    if nvml is not None:
        try:
            return from_nvml(nvml)
        except Exception as exc:  # an NVML error on one call: fall back rather than report nothing
            log.warning("NVML inventory failed (%s); trying nvidia-smi", exc)
    text = smi()
    return parse_smi_csv(text) if text else []


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def from_nvml(nvml: Any) -> list[dict[str, Any]]:
    devices = []
    for index in range(nvml.nvmlDeviceGetCount()):
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        device: dict[str, Any] = {
            "index": index, "uuid": _text(nvml.nvmlDeviceGetUUID(handle))[:128],
            "model": _text(nvml.nvmlDeviceGetName(handle))[:128],
            "memory_mib": int(nvml.nvmlDeviceGetMemoryInfo(handle).total) // 2**20,
            "healthy": _healthy(_health_of(nvml, handle, index))}
        mig = _mig_instances(nvml, handle)
        if mig:
            device["mig"] = mig
        devices.append(device)
    return devices


def _mig_instances(nvml: Any, handle: Any) -> list[dict[str, Any]]:
    try:
        current, _pending = nvml.nvmlDeviceGetMigMode(handle)
    except Exception:  # not supported on this GPU or driver
        return []
    if not current:
        return []
    found = []
    for slot in range(nvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
        try:
            mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
        except Exception:  # an empty slot
            continue
        entry: dict[str, Any] = {"uuid": _text(nvml.nvmlDeviceGetUUID(mig))[:128]}
        with contextlib.suppress(Exception):  # memory of a MIG instance is optional in the report
            entry["memory_mib"] = int(nvml.nvmlDeviceGetMemoryInfo(mig).total) // 2**20
        found.append(entry)
    return found


def parse_smi_csv(text: str) -> list[dict[str, Any]]:
    """``nvidia-smi --query-gpu=index,uuid,name,memory.total --format=csv,noheader,nounits``:
    one line per GPU, ``0, GPU-8c1d..., NVIDIA H100 80GB HBM3, 81559``. Lines that do not parse
    are logged and skipped."""
    devices = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = [p.strip() for p in line.split(",")]
        # The model name may itself hold commas: index and uuid lead, memory ends the line.
        try:
            index, uuid, memory = int(parts[0]), parts[1], int(float(parts[-1]))
        except (ValueError, IndexError):
            log.warning("nvidia-smi line not understood: %r", line)
            continue
        if len(parts) < 4 or not uuid:
            log.warning("nvidia-smi line not understood: %r", line)
            continue
        devices.append({"index": index, "uuid": uuid[:128], "model": ", ".join(parts[2:-1])[:128],
                        "memory_mib": memory, "healthy": True})
    return devices


def _health_of(nvml: Any, handle: Any, index: int) -> dict[str, Any]:
    """What NVML says of one device's health; each counter only where the device supports it."""
    health: dict[str, Any] = {"index": index}
    probes: dict[str, Callable[[], Any]] = {
        "temperature_c": lambda: int(nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU)),
        "ecc_uncorrectable": lambda: int(nvml.nvmlDeviceGetTotalEccErrors(
            handle, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC)),
        "retired_pending": lambda: bool(nvml.nvmlDeviceGetRetiredPagesPendingStatus(handle)),
    }
    for name, probe in probes.items():
        try:
            health[name] = probe()
        except Exception:  # NVMLError_NotSupported: that counter does not exist on this device
            continue
    return health


def _healthy(health: dict[str, Any]) -> bool:
    return not (health.get("ecc_uncorrectable", 0) > 0 or health.get("retired_pending", False))


def health(nvml: Any, xids: dict[int, list[int]] | None = None) -> list[dict[str, Any]]:
    """Every device's health, for a heartbeat, with the Xid events seen since the last one."""
    found = [_health_of(nvml, nvml.nvmlDeviceGetHandleByIndex(i), i) for i in range(nvml.nvmlDeviceGetCount())]
    seen = xids or {}
    for entry in found:
        if seen.get(entry["index"]):
            entry["xid"] = list(dict.fromkeys(seen[entry["index"]]))[:MAX_XIDS]
    return found


def xid_watch(nvml: Any) -> Any | None:
    """An NVML event set receiving every device's critical Xid events (None where NVML cannot:
    Xids are then not reported)."""
    try:
        events = nvml.nvmlEventSetCreate()
        for i in range(nvml.nvmlDeviceGetCount()):
            nvml.nvmlDeviceRegisterEvents(nvml.nvmlDeviceGetHandleByIndex(i), nvml.nvmlEventTypeXidCriticalError,
                                          events)
    except Exception as exc:  # not supported (some GPUs, containers without the capability)
        log.info("Xid events cannot be read: %s", exc)
        return None
    return events


def xid_events(nvml: Any, events: Any) -> dict[int, list[int]]:
    """The Xid events waiting in ``events``, per device index (without waiting for more)."""
    wait = getattr(nvml, "nvmlEventSetWait_v2", None) or nvml.nvmlEventSetWait
    found: dict[int, list[int]] = {}
    for _ in range(64):
        try:
            data = wait(events, 0)
        except Exception:  # NVMLError_Timeout: nothing more waiting
            break
        try:
            index = int(nvml.nvmlDeviceGetIndex(data.device))
        except Exception:
            continue
        found.setdefault(index, []).append(int(data.eventData))
    return found


def visible_env(devices: list[dict[str, Any]]) -> dict[str, str]:
    """The variables that show a process only its bound devices (CUDA and the NVIDIA container
    runtime); no devices: none visible."""
    uuids = ",".join(str(d["uuid"]) for d in devices if d.get("uuid"))
    return {"CUDA_VISIBLE_DEVICES": uuids, "NVIDIA_VISIBLE_DEVICES": uuids or "void"}


def simulated(count: int, model: str = "Simulated GPU 80GB", node: str = "sim") -> list[dict[str, Any]]:
    """Devices a simulated agent reports (demos): ``count`` healthy GPUs with stable UUIDs."""
    return [{"index": i, "uuid": f"GPU-{node[:40]}-{i:02d}", "model": model, "memory_mib": 81920, "healthy": True}
            for i in range(count)]
