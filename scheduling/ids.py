"""Ids given as text (query parameters, cursors, array specs, CLI arguments): ASCII digits only,
since ``str.isdigit()`` also passes "²" (which ``int()`` refuses) and "١٢" or "１２" (which it reads
as another number), and within what the database's bigint ids hold. No imports: the CLI uses it."""

from __future__ import annotations

MAX_ID = 2**63 - 1  # the largest id the database stores
MAX_DIGITS = len(str(MAX_ID))


def decimal(text: str) -> bool:
    """Whether ``text`` is ASCII digits, at least one and no more than the largest id has: a
    longer number is no id or index Lattice holds, and past 4,300 digits ``int()`` refuses it."""
    return 0 < len(text) <= MAX_DIGITS and text.isascii() and text.isdigit()


def row_id(text: str) -> int | None:
    """``text`` as an id the database can hold, or None when it is not one."""
    if not decimal(text):
        return None
    value = int(text)
    return value if value <= MAX_ID else None
