"""Every text of a decoded JSON document (its keys and its strings), walked without recursion: a
document nested as deep as the decoder reads is deeper than a recursive walk can go. The API's
parsers and the replay's file readers judge the texts they find (NUL, lone surrogates). No Django."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def texts(doc: Any) -> Iterator[str]:
    """Each key and string of ``doc``, at any depth."""
    todo = [doc]
    while todo:
        item = todo.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, dict):
            todo += [*item, *item.values()]
        elif isinstance(item, list):
            todo += item


def lone_surrogate(text: str) -> str | None:
    """The first lone surrogate of ``text`` (JSON's ``\\ud800`` escape decodes to one: no
    character, and no UTF-8 can carry it), or None."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return exc.object[exc.start:exc.end]
    return None
