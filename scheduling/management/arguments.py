"""argparse types for the management commands' numbers of seconds: a value that cannot work (not a
number, not finite, below the least that makes sense) is refused as argparse refuses any bad
argument, exit 2 naming the option, before the command runs."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable


def seconds(*, positive: bool) -> Callable[[str], float]:
    """A finite number of seconds: above 0 when ``positive`` (a pause), else at least 0."""
    least = "above 0" if positive else "at least 0"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
        if not math.isfinite(value) or value < 0 or (positive and value == 0):
            raise argparse.ArgumentTypeError(f"{text!r} is not a finite number of seconds {least}")
        return value

    return parse
