"""One job of a trace as the replay sees it, and what reading a trace found."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from scheduling.texts import lone_surrogate, texts


class ReplayError(Exception):
    """A problem with the replay's input: the command exits 2 with this message."""


def check_text(doc: Any, where: str) -> None:
    """A JSON file's texts must be Unicode: JSON's ``\\ud800`` escape reads as a lone surrogate,
    which no UTF-8 report (replay.html) can hold."""
    for text in texts(doc):
        bad = lone_surrogate(text)
        if bad is not None:
            raise ReplayError(f"{where}: {bad!r} is not a character (a lone surrogate)")


@dataclass(frozen=True, slots=True)
class Job:
    """A job read from a trace and mapped to Lattice's terms. Times in seconds; ``run`` is the
    work it does (its trace run time, cut at its walltime when it ran past it)."""

    id: int
    name: str
    submit: float
    run: float
    walltime: float | None
    nodes: int
    gpus: float  # per node
    cpus: float = 0.0  # per node
    tenant: str = "default"
    user: str | None = None
    vcluster: str | None = None
    session_type: str | None = None
    preemption_class: int = 0
    priority: int = 10
    checkpoint: str = "none"
    checkpoint_minutes: float = 5.0
    hit_walltime: bool = False


@dataclass
class ReadStats:
    """Lines read, jobs kept, and why the others were not: ``bad`` are lines that could not be
    read (a count by reason, and the first few with their line numbers); ``skipped`` are jobs
    read fine but left out (no GPUs, outside the dates, past --jobs)."""

    lines: int = 0
    jobs: int = 0
    bad: Counter = field(default_factory=Counter)
    skipped: Counter = field(default_factory=Counter)
    examples: list[str] = field(default_factory=list)

    def bad_line(self, number: int, reason: str) -> None:
        self.bad[reason] += 1
        if len(self.examples) < 5:
            self.examples.append(f"line {number}: {reason}")

    def message(self) -> str:
        """One line for stderr, naming how many lines were bad and why."""
        if not self.bad:
            return f"{self.jobs} jobs read from {self.lines} lines"
        reasons = ", ".join(f"{n} {r}" for r, n in sorted(self.bad.items()))
        return (f"{self.jobs} jobs read from {self.lines} lines; {sum(self.bad.values())} bad lines "
                f"skipped ({reasons}); first: {'; '.join(self.examples)}")

    def to_dict(self) -> dict:
        return {"lines": self.lines, "jobs": self.jobs, "bad_lines": dict(sorted(self.bad.items())),
                "bad_examples": list(self.examples), "skipped": dict(sorted(self.skipped.items()))}
