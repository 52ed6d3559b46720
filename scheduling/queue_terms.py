"""The parts of a queue's sort key in words, as the job page and ``lattice explain`` name them
(the API keeps the terms' own names). Imports nothing of Django: the command line uses it."""

from __future__ import annotations

TERM_WORDS = {"holds_nodes": "holding nodes", "class": "class", "priority": "priority", "score": "score",
              "queue_priority": "queue priority", "rank": "rank", "starving": "tenant starving",
              "deficit": "fair-share deficit", "submitted_at": "submitted"}


def term_words(term: str) -> str:
    """``term`` in words (itself when it has none)."""
    return TERM_WORDS.get(term, term)
