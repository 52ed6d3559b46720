"""A fake NVML with pynvml's API (the calls nodes/devices.py makes): GPUs with indices, UUIDs,
models, memory, MIG instances and ECC counters, set by the test. NVML is an edge Lattice does
not own; these tests run where there is no GPU."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

NVML_TEMPERATURE_GPU = 0
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_VOLATILE_ECC = 0


class NVMLError(Exception):
    pass


@dataclass
class FakeGPU:
    uuid: str
    name: str = "NVIDIA H100 80GB HBM3"
    memory_mib: int = 81559
    temperature_c: int = 40
    ecc_uncorrectable: int = 0
    retired_pending: bool = False
    mig: list[str] = field(default_factory=list)  # MIG instance UUIDs; empty: MIG off
    xid_pending: list[int] = field(default_factory=list)  # Xid events not yet read by the agent


class FakeNVML:
    NVMLError = NVMLError
    nvmlEventTypeXidCriticalError = 8
    NVML_TEMPERATURE_GPU = NVML_TEMPERATURE_GPU
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    NVML_VOLATILE_ECC = NVML_VOLATILE_ECC

    def __init__(self, gpus: list[FakeGPU]) -> None:
        self.gpus = gpus
        self.initialised = False

    def nvmlInit(self) -> None:
        self.initialised = True

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
        if not 0 <= index < len(self.gpus):
            raise NVMLError("invalid argument")
        return ("gpu", index)

    def _gpu(self, handle: Any) -> FakeGPU:
        return self.gpus[handle[1]]

    def nvmlDeviceGetUUID(self, handle: Any) -> Any:
        if handle[0] == "mig":
            return self.gpus[handle[1]].mig[handle[2]].encode()  # older pynvml returns bytes
        return self._gpu(handle).uuid

    def nvmlDeviceGetName(self, handle: Any) -> str:
        return self._gpu(handle).name

    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> Any:
        gpu = self._gpu(handle)
        total = gpu.memory_mib // (7 if handle[0] == "mig" else 1)
        return SimpleNamespace(total=total * 2**20, free=0, used=0)

    def nvmlDeviceGetMigMode(self, handle: Any) -> tuple[int, int]:
        gpu = self._gpu(handle)
        if not gpu.mig:
            raise NVMLError("not supported")
        return (1, 1)

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: Any) -> int:
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: Any, slot: int) -> Any:
        if slot >= len(self._gpu(handle).mig):
            raise NVMLError("not found")
        return ("mig", handle[1], slot)

    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int:
        return self._gpu(handle).temperature_c

    def nvmlDeviceGetTotalEccErrors(self, handle: Any, kind: int, counter: int) -> int:
        assert (kind, counter) == (NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC)
        return self._gpu(handle).ecc_uncorrectable

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: Any) -> int:
        return int(self._gpu(handle).retired_pending)

    def nvmlDeviceGetIndex(self, handle: Any) -> int:
        return int(handle[1])

    def nvmlEventSetCreate(self) -> Any:
        return {"registered": set()}

    def nvmlDeviceRegisterEvents(self, handle: Any, kinds: int, events: Any) -> None:
        assert kinds == self.nvmlEventTypeXidCriticalError
        events["registered"].add(handle[1])

    def nvmlEventSetWait(self, events: Any, timeout_ms: int) -> Any:
        for index in sorted(events["registered"]):
            gpus = self.gpus
            if index < len(gpus) and gpus[index].xid_pending:
                return SimpleNamespace(device=("gpu", index), eventData=gpus[index].xid_pending.pop(0),
                                       eventType=self.nvmlEventTypeXidCriticalError)
        raise NVMLError("timeout")


class FileNVML(FakeNVML):
    """A fake whose GPUs are read from a JSON file at every call: a test changes a running agent's
    GPUs (an ECC error appearing) by rewriting the file."""

    def __init__(self, path: str) -> None:
        super().__init__([])
        self.path = path

    @property  # type: ignore[override]
    def gpus(self) -> list[FakeGPU]:
        with open(self.path) as f:
            return [FakeGPU(**g) for g in json.load(f)]

    @gpus.setter
    def gpus(self, value: list[FakeGPU]) -> None:
        pass


def gpus(count: int, prefix: str = "GPU-fake") -> list[FakeGPU]:
    return [FakeGPU(uuid=f"{prefix}-{i:04d}-0000-0000-000000000000") for i in range(count)]


def from_env() -> FakeNVML:
    """The fake an agent process loads (fake_nvml/pynvml.py): FAKE_NVML_GPUS GPUs named after
    FAKE_NVML_PREFIX, or FAKE_NVML_JSON (a list of FakeGPU fields), or FAKE_NVML_FILE (the same,
    in a file read at every call)."""
    if os.environ.get("FAKE_NVML_FILE"):
        return FileNVML(os.environ["FAKE_NVML_FILE"])
    if os.environ.get("FAKE_NVML_JSON"):
        return FakeNVML([FakeGPU(**g) for g in json.loads(os.environ["FAKE_NVML_JSON"])])
    return FakeNVML(gpus(int(os.environ.get("FAKE_NVML_GPUS", "8")), os.environ.get("FAKE_NVML_PREFIX", "GPU-fake")))
