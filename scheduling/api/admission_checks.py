"""Checks of a submission against what can ever run it: the agent protocol's frame, the group's
nodes, and the tenant's leave to escape preemption. Each returns field errors (field -> message),
empty when the submission passes; the serializer (``AllocationInput``) calls them."""

from __future__ import annotations

from collections import Counter
from typing import Any

import orjson

from nodes.models import Node
from nodes.protocol import MAX_START_FRAME_BYTES, Start, encode
from scheduling.admission_sql import node_summary
from scheduling.engine.cluster import floor_limit
from scheduling.ids import decimal
from scheduling.models import Allocation, Quota, ResourceGroup, SessionType, VCluster
from scheduling.models.allocations import RESOURCES


def start_frame_errors(command: list[str], env: dict[str, str]) -> dict[str, str]:
    """The ``start`` frame carries the command and env as submitted: it must fit the protocol's
    frame limit with room to spare, whatever the allocation's id and resources (taken at their
    largest here), or no agent could ever receive it."""
    widest = Start(allocation="9" * 20, command=command, env=env, resources={r: 10**6 for r in RESOURCES},
                   resume_from_checkpoint=False, checkpoint_dir="checkpoints/" + "9" * 20)
    size = len(orjson.dumps(encode(widest)))
    if size <= MAX_START_FRAME_BYTES:
        return {}
    env_size, command_size = len(orjson.dumps(env)), len(orjson.dumps(command))
    field = "env" if env_size >= command_size else "command"
    return {field: (f"the start frame would be {size} bytes (env {env_size}, command {command_size}); "
                    f"command and env together must fit in {MAX_START_FRAME_BYTES} bytes")}


def needs(per_node: dict[str, int]) -> dict[str, int]:
    """What a node must have of every resource to hold one node's share of the request."""
    return {resource: per_node.get(resource, 0) for resource in RESOURCES}


def never_fits_errors(group: ResourceGroup, vc: VCluster | None, per_node: dict[str, int], nodes: int, *,
                      own_only: bool, summary: list[dict[str, Any]] | None = None) -> dict[str, str]:
    """Work that no node of the group (that its vCluster may ever use) could hold would wait
    forever: refused, naming the resource no node has enough of, or the node count. Every node
    counts whatever its state (a drained or down node may come back); a vCluster uses its own
    nodes, nodes with no home, and (unless ``own_only``: non-preemptible work) nodes it may
    borrow from vClusters that lend. ``summary``: ``node_summary`` of ``per_node`` when the caller
    read it already."""
    # One row per vCluster (and one for nodes with no home), aggregated in the database: a group
    # of 10,000 nodes is not read node by node for every submission.
    need = needs(per_node)
    rows = node_summary(group.pk, need) if summary is None else summary
    where = f"resource group {group.name}" + (f" (vCluster {vc.name})" if vc is not None else "")
    lendable: dict[int, int] = {}  # lender vCluster id -> how many nodes it may lend at most
    if vc is not None:
        if not own_only and vc.allow_borrowing:
            for row in rows:
                if row["vcluster_id"] not in (None, vc.pk) and row["allow_lending"]:
                    lendable[row["vcluster_id"]] = floor_limit(row["nodes"], row["max_borrow_pct"])
        rows = [r for r in rows if r["vcluster_id"] in (None, vc.pk) or lendable.get(r["vcluster_id"], 0) > 0]
    for resource in RESOURCES:
        most = max((r[f"most_{resource}"] for r in rows), default=0)
        if need[resource] > most:
            return {"per_node": f"no node in {where} has {need[resource]} {resource} (the most any has is {most})"}
    count = 0
    for r in rows:
        if vc is None or r["vcluster_id"] in (None, vc.pk):
            count += r["holding"]
        else:  # a lender's nodes, as many as it may lend
            count += min(r["holding"], lendable[r["vcluster_id"]])
    if nodes > count:
        return {"nodes": f"{nodes} nodes asked, but only {count} node(s) in {where} could ever hold this per_node"}
    return {}


def constraint_errors(group: ResourceGroup, vc: VCluster | None, per_node: dict[str, int], nodes: int,
                      constraints: dict[str, Any], *, own_only: bool,
                      summary: list[dict[str, Any]] | None = None) -> dict[str, str]:
    """Label constraints no node could ever meet would wait forever too (``never_fits_errors``):
    refused, naming them. Counted as the engine matches (scheduling/engine/binding.py): nodes
    carrying every label of ``labels`` and, with ``same``, that label, in the largest set sharing
    its value; of the group's nodes the vCluster may ever use (a lender's up to its lending cap),
    whatever their state, that could hold ``per_node``. Nodes are read only for work with
    constraints, and only those carrying the labels' names."""
    labels, same = dict(constraints.get("labels") or {}), constraints.get("same") or ""
    if not labels and not same:
        return {}
    need = needs(per_node)
    caps: dict[int, int] = {}  # lender vCluster id -> how many nodes it may lend at most
    if vc is not None and vc.allow_borrowing and not own_only:
        rows = node_summary(group.pk, need) if summary is None else summary
        caps = {r["vcluster_id"]: floor_limit(r["nodes"], r["max_borrow_pct"]) for r in rows
                if r["vcluster_id"] not in (None, vc.pk) and r["allow_lending"]}
    found = Counter[tuple[str, int | None]]()  # (the value of ``same``, the lender or None) -> nodes
    for vc_id, carried, *amounts in (Node.objects.filter(resource_group_id=group.pk,
                                                          labels__has_keys=[*labels, *([same] if same else [])])
                                     .values_list("vcluster_id", "labels", *RESOURCES)):
        lender = None if vc is None or vc_id in (None, vc.pk) else vc_id
        if (lender is None or lender in caps) and all(carried.get(k) == v for k, v in labels.items()) and all(
                have >= need[r] for r, have in zip(RESOURCES, amounts, strict=True)):
            found[(carried.get(same, "") if same else "", lender)] += 1
    sizes = Counter[str]()
    for (value, lender), count in found.items():
        sizes[value] += count if lender is None else min(count, caps[lender])
    most = max(sizes.values(), default=0)
    if most >= nodes:
        return {}
    asked = [f"label {k}={v}" for k, v in sorted(labels.items())] + ([f"the same {same}"] if same else [])
    where = f"resource group {group.name}" + (f" (vCluster {vc.name})" if vc is not None else "")
    return {"constraints": f"{nodes} node(s) with {'; '.join(asked)} asked, but only {most} in {where} "
                           "could ever hold this per_node with them"}


# Job fields that make work never (or rarely) a victim, and the quota field that allows each.
ESCAPES = {"preemptible": (False, "non_preemptible"), "exclusive": (True, "exclusive"),
           "forced": (True, "forced"), "backfill": (True, "backfill")}


def escape_errors(attrs: dict[str, Any], quota: Quota | None, session_type: SessionType | None) -> dict[str, str]:
    """``preemptible: false``, ``exclusive``, ``forced`` and ``backfill`` shield work from
    preemption: a tenant sets them only where an operator allowed it (on the tenant's quota),
    or the session type it submits under sets them itself."""
    errors = {}
    for field, (shielded, kind) in ESCAPES.items():
        if attrs.get(field, not shielded) != shielded:
            continue
        allowance = f"allow_{kind}"
        from_type = session_type is not None and getattr(session_type, kind)
        if not from_type and not (quota is not None and getattr(quota, allowance)):
            errors[field] = (f"{field}={str(shielded).lower()} needs an operator's leave for the tenant "
                             f"(its quota's {allowance}) or a session type that sets it")
    return errors


def session_type_escapes(fields: dict[str, Any], session_type: SessionType | None) -> dict[str, Any]:
    """The job's fields with those its session type sets (its work always carries them)."""
    if session_type is None:
        return fields
    out = dict(fields)
    for field, (shielded, kind) in ESCAPES.items():
        if getattr(session_type, kind):
            out[field] = shielded
    return out


MAX_ARRAY_TASKS = 1000
MAX_ARRAY_INDEX = 1_000_000


def parse_array(spec: str) -> tuple[list[int], int | None]:
    """``"0-99%10"``, ``"1,3,5-7"``, ``"0-15:4"`` (a step): the indices in ascending order and the
    throttle (``%N``, at most N tasks running at once), or ValueError saying what is wrong."""
    body, _, throttle_text = spec.strip().partition("%")
    throttle = None
    if throttle_text:
        if not decimal(throttle_text) or not 1 <= int(throttle_text) <= MAX_ARRAY_TASKS:
            raise ValueError(f"the throttle after % must be an integer from 1 to {MAX_ARRAY_TASKS} "
                             f"(the most tasks an array has), not {throttle_text!r}")
        throttle = int(throttle_text)
    indices: set[int] = set()
    for part in body.split(","):
        part = part.strip()
        span, _, step_text = part.partition(":")
        low_text, dash, high_text = span.partition("-")
        if not decimal(low_text) or (dash and not decimal(high_text)) or (step_text and not decimal(step_text)):
            raise ValueError(f"{part!r} is not an index, a range A-B or a range with a step A-B:S")
        low, high = int(low_text), int(high_text) if dash else int(low_text)
        step = int(step_text) if step_text else 1
        if high < low or step < 1 or high > MAX_ARRAY_INDEX:
            raise ValueError(f"{part!r}: ranges go upwards, steps are positive, indices at most {MAX_ARRAY_INDEX}")
        if (high - low) // step + 1 + len(indices) > MAX_ARRAY_TASKS:
            raise ValueError(f"an array has at most {MAX_ARRAY_TASKS} tasks")
        indices.update(range(low, high + 1, step))
    return sorted(indices), throttle


def dependency_errors(tenant: Any, depends_on: list[dict[str, Any]]) -> str | None:
    """Dependencies name jobs of the same tenant that exist: another tenant's job, or one not yet
    submitted, is refused. A job's dependencies are fixed when it is submitted and only name jobs
    that exist then, so no cycle can form (a job cannot name itself or a later job)."""
    ids = [int(d["job"]) for d in depends_on]
    if len(set(ids)) != len(ids):
        return "a job is named twice"
    known = set(Allocation.objects.filter(pk__in=ids, tenant=tenant).values_list("id", flat=True))
    missing = [str(i) for i in ids if i not in known]
    if missing:
        return (f"no job {', '.join(missing)} of tenant {tenant.name} (a dependency names an earlier job of "
                "the same tenant; one not yet submitted could close a cycle)")
    return None
