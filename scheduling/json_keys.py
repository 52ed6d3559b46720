"""A JSON object whose key is given twice is refused rather than read as its last copy (what
``json`` does without a word), so what Lattice acts on is what anyone reading the text sees. No
imports: the CLI uses it as the API's parser does."""

from __future__ import annotations

from typing import Any


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook`` for ``json``: the object as a dict, or a ValueError naming the first
    key given twice (as ``repr`` shows it: a NUL or a lone surrogate escaped)."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        key = next(k for k, _ in pairs if k in seen or seen.add(k))  # type: ignore[func-returns-value]
        raise ValueError(f"the key {key!r} is given more than once in one object")
    return obj
