"""The shapes of the device lists in the agent protocol's frames (nodes/protocol.py): a hello's
devices and a heartbeat's per-GPU health, as predicates and problems the parser's checks raise."""

from __future__ import annotations

from typing import Any

# A device: {index, uuid, model, memory_mib, healthy?, mig?: [{uuid, profile?, memory_mib?}]}.
DEVICE_KEYS = {"index": (int,), "uuid": (str,), "model": (str,), "memory_mib": (int,)}
DEVICE_OPTIONAL = {"healthy": (bool,), "mig": (list,)}
MIG_KEYS = {"uuid": (str,)}
MIG_OPTIONAL = {"profile": (str,), "memory_mib": (int,)}
# Per-GPU health in a heartbeat: {index, temperature_c?, ecc_uncorrectable?, retired_pending?, xid?},
# ``xid`` the Xid events seen since the previous heartbeat (at most MAX_XIDS codes).
HEALTH_KEYS = {"index": (int,)}
HEALTH_OPTIONAL = {"temperature_c": (int,), "ecc_uncorrectable": (int,), "retired_pending": (bool,),
                    "xid": (list,)}
MAX_XIDS = 16
MAX_DEVICES = 64  # GPUs one hello may list (with their MIG instances)
INT_MAX = 2**31 - 1


def shaped(entry: object, required: dict[str, tuple[type, ...]], optional: dict[str, tuple[type, ...]]) -> bool:
    """A JSON object with exactly these keys' types (a boolean is no integer), strings of at most
    128 characters and integers from 0 to 2^31-1."""
    if not isinstance(entry, dict) or not set(required) <= set(entry) <= set(required) | set(optional):
        return False
    for key, value in entry.items():
        types = required.get(key) or optional[key]
        if isinstance(value, bool) != (bool in types) or not isinstance(value, types):
            return False
        if isinstance(value, str) and len(value) > 128:
            return False
        if isinstance(value, int) and not isinstance(value, bool) and not 0 <= value <= 2**31 - 1:
            return False
    return True


HEALTH_FIELDS = frozenset(HEALTH_KEYS) | frozenset(HEALTH_OPTIONAL)


def health_entry(entry: object) -> bool:
    """``shaped(entry, HEALTH_KEYS, HEALTH_OPTIONAL)`` and its Xids, written out for the one
    shape every heartbeat carries per GPU (the generic check was most of a heartbeat's parsing).
    The values come from orjson, so ``type(...) is`` is exact: a boolean is no integer."""
    if type(entry) is not dict or "index" not in entry or not HEALTH_FIELDS.issuperset(entry):
        return False
    for key, value in entry.items():
        kind = type(value)
        if kind is int:
            if key == "retired_pending" or key == "xid" or not 0 <= value <= INT_MAX:
                return False
        elif kind is bool:
            if key != "retired_pending":
                return False
        elif kind is list:
            if key != "xid" or not xids_ok(value):
                return False
        else:
            return False
    return True


def xids_ok(codes: list[Any]) -> bool:
    return len(codes) <= MAX_XIDS and all(type(c) is int and 0 <= c <= INT_MAX for c in codes)


def devices_problem(devices: list[Any]) -> str | None:
    """What is wrong with a hello's ``devices``, or None."""
    if len(devices) > MAX_DEVICES:
        return f"at most {MAX_DEVICES} devices"
    for device in devices:
        mig = device.get("mig", []) if isinstance(device, dict) else []
        if not shaped(device, DEVICE_KEYS, DEVICE_OPTIONAL) or len(mig) > MAX_DEVICES or not all(
                shaped(m, MIG_KEYS, MIG_OPTIONAL) for m in mig):
            return "devices are {index, uuid, model, memory_mib, healthy?, mig?}"
    if len({d["index"] for d in devices}) != len(devices):
        return "device indices must be distinct"
    # A start shows its work the bound devices by uuid: two devices of one uuid would let two
    # allocations bound to different indices share one GPU.
    uuids = [d["uuid"] for d in devices] + [m["uuid"] for d in devices for m in d.get("mig", [])]
    if len(set(uuids)) != len(uuids):
        return "device and MIG uuids must be distinct"
    if not all(u.strip() for u in uuids):  # a start names its work's devices by uuid
        return "device and MIG uuids must not be empty"
    return None


def health_problem(gpus: list[Any]) -> str | None:
    """What is wrong with a heartbeat's per-GPU health, or None."""
    if len(gpus) > MAX_DEVICES or not all(health_entry(g) for g in gpus):
        return "gpus are {index, temperature_c?, ecc_uncorrectable?, retired_pending?, xid?}"
    if len({g["index"] for g in gpus}) != len(gpus):
        return "gpu indices must be distinct"
    return None
