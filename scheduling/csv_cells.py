"""CSV written for spreadsheets: a text cell that a spreadsheet would read as a formula (it starts
with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return) is written with a leading apostrophe,
as OWASP's advice on CSV injection has it, so that a name such as a user's ``@x`` or ``-1-2`` is
shown as written and never evaluated. Numbers are written as they are. Imports nothing of Django:
the CLI writes CSV with it too."""

from __future__ import annotations

import csv
from collections.abc import Iterable, Mapping
from typing import Any, TextIO

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def cell(value: Any) -> Any:
    """``value`` as a spreadsheet should show it: text that could start a formula is quoted."""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


def write_rows(out: TextIO, fields: list[str], rows: Iterable[Mapping[str, Any]]) -> None:
    """A header and ``rows`` (dicts keyed by ``fields``), every text cell made safe."""
    writer = csv.DictWriter(out, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    writer.writerows({k: cell(v) for k, v in row.items()} for row in rows)
