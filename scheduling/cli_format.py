"""How the tenants' command line prints what the API answers (standard library only)."""

from __future__ import annotations

import argparse
import csv
import json
from typing import Any, TextIO


def score_lines(score: dict) -> list[str]:
    """Where it stands in the queue: the score's sentence, then each term with its weight."""
    lines = [score.get("summary") or f"queue score {score.get('score')}"]
    lines += [f"  {t['term']} {t['name']:<22} {t['value']:.3f} x {t['weight']:.2f} = {t['part']:.3f}"
              for t in score.get("terms", [])]
    return lines



def usage_output(body: dict[str, Any], args: argparse.Namespace, out: TextIO) -> None:
    """GPU-hours and node-hours from the server's accounting: a table, CSV or the API's JSON."""
    if args.json:
        out.write(json.dumps(body, indent=2) + "\n")
        return
    fields = [*body["group_by"], "gpu_seconds", "gpu_hours", "node_hours"]
    if args.csv:
        writer = csv.DictWriter(out, fieldnames=fields, lineterminator="\n")
        writer.writeheader()
        writer.writerows(body["rows"])
        return
    out.write(f"usage from {body['since']} to {body['until']}\n")
    table = [fields] + [[str(r[f]) for f in fields] for r in body["rows"]]
    widths = [max(len(row[i]) for row in table) for i in range(len(fields))]
    for row in table:
        out.write("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() + "\n")
    if not body["rows"]:
        out.write("no usage in this window\n")
