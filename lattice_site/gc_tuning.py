"""Garbage collection for Lattice's long-running processes: the ASGI server and the worker.

Both keep many long-lived objects: a server its WebSockets (1,000 agents are some
hundred thousand objects), the worker each resource group's kept snapshot (50,000
allocations and their arrays). With Python's default thresholds a full collection
walks all of them every few seconds and stalls everything else: 100 ms and more
for the server's loop (ack p99 270 to 390 ms at 4,000 heartbeats/s, 80 to 130 ms
with these thresholds) and 130 ms in the middle of a scheduler pass (p99 from
submission to placement 69 ms at 300 requests/s, 29 ms with them).

Young collections come every 10,000 allocations instead of 700, full ones a
hundred times less often; reference counting still frees at once everything
that is not part of a cycle.
"""

from __future__ import annotations

import gc

THRESHOLDS = (10_000, 20, 1_000)


def for_long_running_process() -> None:
    """Keep what is loaded so far (code, settings: it lives as long as the process) out of
    every sweep, and collect less often."""
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
