"""How the tenants' command line prints what the API answers (standard library only)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any, TextIO

from scheduling.csv_cells import write_rows


def score_lines(score: dict) -> list[str]:
    """Where it stands in the queue: the score's sentence, then each term with its weight."""
    lines = [score.get("summary") or f"queue score {score.get('score')}"]
    lines += [f"  {t['term']} {t['name']:<22} {t['value']:.3f} x {t['weight']:.2f} = {t['part']:.3f}"
              for t in score.get("terms", [])]
    return lines



def estimate_line(est: dict[str, Any]) -> str:
    """``explain``'s start estimate, in words, with what it assumes."""
    made = f"an estimate made {est['computed_at']}, assuming {est['assumptions']}"
    if est["estimated_start"] is None:
        return (f"estimated start: none, {est.get('not_estimated') or 'it is not in the queue yet'}"
                if not est["in_queue"]
                else f"estimated start: not within 30 days ({made})")
    seconds = est["in_s"]
    when = ("at the next pass" if seconds < 60 else f"in {seconds // 60} min" if seconds < 7200
            else f"in {seconds / 3600:.1f} h")
    return f"estimated start: {est['estimated_start']}, {when} ({made})"


def usage_output(body: dict[str, Any], args: argparse.Namespace, out: TextIO) -> None:
    """GPU-hours and node-hours from the server's accounting: a table, CSV or the API's JSON."""
    if args.json:
        out.write(json.dumps(body, indent=2) + "\n")
        return
    fields = [*body["group_by"], "gpu_seconds", "gpu_hours", "node_hours"]
    if args.csv:
        write_rows(out, fields, body["rows"])
        return
    out.write(f"usage from {body['since']} to {body['until']}\n")
    table = [fields] + [[str(r[f]) for f in fields] for r in body["rows"]]
    widths = [max(len(row[i]) for row in table) for i in range(len(fields))]
    for row in table:
        out.write("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() + "\n")
    if not body["rows"]:
        out.write("no usage in this window\n")


def index_ranges(indices: list[int]) -> str:
    """Array indices as Slurm writes them: ``0-3,7,9-10``."""
    runs: list[list[int]] = []
    for i in sorted(indices):
        if runs and runs[-1][1] == i - 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def array_line(array: dict[str, Any]) -> str:
    """One array as the list prints it: its id, spec, group and how many tasks in each state."""
    counts = ", ".join(f"{n} {state}" for state, n in array["counts"].items()) or "no tasks"
    return (f"array #{array['id']:<5} {array['spec']:<13} {array['resource_group']}  "
            f"{array['size']} task{'s' if array['size'] != 1 else ''}: {counts}")


def list_lines(rows: list[dict[str, Any]], array_of: Callable[[int], dict[str, Any]],
               line: Callable[[dict[str, Any]], str]) -> list[str]:
    """Allocations one a line, an array's tasks as one line where its first task is listed
    (``array_of`` reads the array with its counts; ``list --array ID`` lists the tasks)."""
    out: list[str] = []
    seen: set[int] = set()
    for a in rows:
        if a.get("array") is None:
            out.append(line(a))
        elif a["array"] not in seen:
            seen.add(a["array"])
            out.append(array_line(array_of(a["array"])))
    return out


def collapse_pending_tasks(found: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """An array's pending tasks as one queue line, as squeue prints them: ``ARRAY_[0-3,7]`` at the
    place of its best task (the position and reason are that task's). Running tasks stay one a line."""
    out: list[dict[str, Any]] = []
    lines: dict[int, dict[str, Any]] = {}
    for a in found:
        array = a.get("array")
        if array is None or a["state"] != "pending":
            out.append(a)
            continue
        if array not in lines:
            lines[array] = {**a, "indices": []}
            out.append(lines[array])
        lines[array]["indices"].append(a["array_index"])
    for merged in lines.values():
        merged["id"] = f"{merged['array']}_[{index_ranges(merged['indices'])}]"
    return out


# squeue-style columns: header, width, how a row (an allocation with its queue entry) shows it.
QUEUE_COLUMNS: dict[str, tuple[str, int, Any]] = {
    "id": ("JOBID", 8, lambda a, q: a["id"]),
    "name": ("NAME", 20, lambda a, q: a["name"] or "-"),
    "group": ("GROUP", 12, lambda a, q: a["resource_group"]),
    "vcluster": ("VCLUSTER", 9, lambda a, q: a.get("vcluster") or "-"),
    "user": ("USER", 9, lambda a, q: a["user"]),
    "state": ("STATE", 13, lambda a, q: a["state"]),
    "class": ("CLASS", 5, lambda a, q: a["preemption_class"]),
    "prio": ("PRIO", 4, lambda a, q: a["priority"]),
    "nodes": ("NODES", 5, lambda a, q: a["nodes"]),
    "gpus": ("GPUS", 4, lambda a, q: f"{a['per_node'].get('gpu', 0):g}"),
    "pos": ("POS", 5, lambda a, q: q["position"] if q and q["position"] is not None else "-"),
    "ahead": ("AHEAD", 5, lambda a, q: q["ahead"] if q and q["ahead"] is not None else "-"),
    "score": ("SCORE", 6, lambda a, q: f"{q['score']:.3f}" if q and q.get("score") is not None else "-"),
    "reason": ("REASON", 18, lambda a, q: f"({q['reason']['code']})" if q and q.get("reason") else "-"),
    "why": ("WHY", 0, lambda a, q: q["reason"]["explanation"] if q and q.get("reason") else "-"),
}


def queue_table(columns: list[str], rows: list[dict[str, Any]]) -> list[str]:
    """The header and a line per row, each cell cut to its column's width (ending in "…" when
    cut) so that the columns stay in line whatever the names (a width of 0: never cut)."""
    spec = [QUEUE_COLUMNS[c] for c in columns]

    def cell(value: Any, width: int) -> str:
        text = str(value)
        return f"{text[:width - 1]}…" if width and len(text) > width else f"{text:<{width}}"

    return [" ".join(cell(h, w) for h, w, _ in spec).rstrip(),
            *(" ".join(cell(get(a, a["queue"]), w) for _, w, get in spec).rstrip() for a in rows)]
