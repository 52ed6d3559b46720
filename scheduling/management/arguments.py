"""argparse types for the management commands' numbers of seconds and server URLs: a value that
cannot work (not a number, not finite, below the least that makes sense; a URL no HTTP client can
reach) is refused as argparse refuses any bad argument, exit 2 naming the option, before the
command runs."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from urllib.parse import urlsplit


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


def http_url(text: str) -> str:
    """A server's base URL: http or https with a host (anything else would be retried for ever)."""
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018 (read for its check: a port that is not a number or out of range)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a URL") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise argparse.ArgumentTypeError(f"{text!r} is not an http:// or https:// URL with a host")
    return text
