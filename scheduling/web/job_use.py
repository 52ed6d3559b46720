"""What a job has used, for its page: elapsed time of its current (or last) run, the nodes it holds
or last ran on, and GPU-hours billed so far, counted by the accounting's own rule
(scheduling/accounting.py: every second it held each node, times its GPUs there) from its events."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from scheduling import accounting
from scheduling.models import Allocation, AllocationEvent
from scheduling.states import FINAL, HOLDING


def words(delta: timedelta) -> str:
    seconds = int(delta.total_seconds())
    hours, rest = divmod(seconds, 3600)
    return f"{hours}h {rest // 60:02d}m {rest % 60:02d}s" if hours else f"{rest // 60}m {rest % 60:02d}s"


def job_use(alloc: Allocation, events: Iterable[AllocationEvent], now: datetime) -> dict[str, Any]:
    pieces = accounting.holding_pieces(
        [(e.to_state, e.created_at, e.node_freed) for e in events], until=now, nodes=alloc.node_count)
    gpus = alloc.node_count * alloc.per_node_gpu
    held = sum((accounting.micros(end - start) * nodes for start, end, nodes in pieces), 0)
    elapsed = elapsed_s = None
    if alloc.started_at is not None:
        end = alloc.ended_at if alloc.state in FINAL and alloc.ended_at else (
            now if alloc.state in HOLDING else alloc.state_changed_at or now)
        elapsed_s = int(max(timedelta(0), end - alloc.started_at).total_seconds())
        elapsed = words(timedelta(seconds=elapsed_s))
    nodes = sorted({p.node.name for p in alloc.placements.select_related("node") if p.kind == "assigned"})
    # While it holds its nodes both figures grow by the second: the page counts on from them
    # (static/js/tick.js) between the live feed's refreshes, which come only with events.
    ticking = alloc.state in HOLDING and elapsed_s is not None
    return {"gpu_hours": held * alloc.per_node_gpu / accounting.MICRO / 3600, "elapsed": elapsed, "elapsed_s": elapsed_s,
            "ticking": ticking, "gpus": gpus,
            "nodes": nodes or list(alloc.ran_on or []), "nodes_now": bool(nodes)}
