"""A progress line on stderr for long replays: jobs done, simulated time, rate, ETA."""

from __future__ import annotations

import time
from typing import TextIO


class Progress:
    def __init__(self, out: TextIO | None, total: int, label: str, every_s: float = 0.5) -> None:
        self.out, self.total, self.label, self.every = out, total, label, every_s
        self.began = self.last = time.monotonic()
        self.start_t: float | None = None

    def __call__(self, done: int, t: float) -> None:
        if self.out is None:
            return
        if self.start_t is None:
            self.start_t = t
        now = time.monotonic()
        if now - self.last < self.every and done < self.total:
            return
        self.last = now
        rate = done / max(now - self.began, 1e-9)
        eta = (self.total - done) / rate if rate > 0 else float("inf")
        days = (t - self.start_t) / 86400
        self.out.write(f"\r{self.label}: {done}/{self.total} jobs, {days:.2f} simulated days, "
                       f"{rate:.0f} jobs/s, ETA {eta:.0f} s   ")
        self.out.flush()

    def finish(self) -> None:
        if self.out is not None:
            self.out.write("\n")
            self.out.flush()
