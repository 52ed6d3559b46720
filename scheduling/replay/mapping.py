"""How a trace's columns become Lattice's tenants, vClusters, session types, classes and priorities.

A mapping (JSON) has one rule per field; each rule either gives a ``value`` or names the column
it comes ``from`` and says how the column's text becomes the value: a ``map`` of exact texts, a
``prefix`` (names), ``bands`` of numbers (``[[threshold, value], ...]``: the value of the highest
threshold at or below the number, or ``"quartiles"`` of the column over the trace with
``band_values``), else the text itself, else ``default``. docs/replay.md lists every field.
"""

from __future__ import annotations

import bisect
import json
import math
from dataclasses import dataclass, field
from typing import Any

from scheduling.engine import MAX_DURATION_MINUTES
from scheduling.engine.reader import NUMBER_LIMIT

from .trace import ReplayError, check_text

FIELDS = ("tenant", "user", "vcluster", "session_type", "class", "priority", "checkpoint")
NUMBERS = {"class": (0, 10), "priority": (0, 100)}
CHECKPOINTS = ("auto", "manual", "none")
_TOP = {*FIELDS, "checkpoint_minutes", "min_gpus", "gpus_per_processor"}
_RULE = {"from", "value", "map", "prefix", "default", "bands", "band_values"}


class OutOfRange(ValueError):
    """A trace's text that a class or priority rule reads as a number outside the field's range."""

DEFAULTS: dict[str, dict[str, Any]] = {
    "swf": {"tenant": {"from": "group", "prefix": "g"}, "user": {"from": "user", "prefix": "u"},
            "class": {"value": 0}, "priority": {"value": 10}},
    "slurm-csv": {"tenant": {"from": "account_id", "prefix": "acct-"},
                  "vcluster": {"from": "partition_id", "prefix": "p"},
                  "class": {"from": "priority_sacct", "bands": "quartiles", "band_values": [1, 2, 3, 4]},
                  "priority": {"from": "priority_sacct", "bands": "quartiles", "band_values": [10, 20, 30, 40]},
                  "min_gpus": 1},
    "lattice": {"tenant": {"from": "tenant"}, "user": {"from": "user"}, "vcluster": {"from": "vcluster"},
                "session_type": {"from": "session_type"}, "class": {"from": "preemption_class"},
                "priority": {"from": "priority"}, "checkpoint": {"from": "checkpoint"}},
}


@dataclass
class Rule:
    name: str
    source: str | None = None
    value: Any = None
    table: dict[str, Any] = field(default_factory=dict)
    prefix: str = ""
    default: Any = None
    bands: list[tuple[float, Any]] | None = None
    quartiles: list[Any] | None = None  # band values, thresholds computed from the trace

    def apply(self, raw: str | None) -> Any:
        if self.source is None:
            return self.value
        if raw is None or raw == "" or raw == "-1":
            return self.default
        if raw in self.table:
            return self.table[raw]
        if self.bands is not None:
            try:
                number = float(raw)
            except ValueError:
                return self.default
            i = bisect.bisect_right([t for t, _ in self.bands], number) - 1
            return self.bands[i][1] if i >= 0 else self.default
        if self.name in NUMBERS:
            try:
                number = float(raw)
            except ValueError:
                return self.default
            lo, hi = NUMBERS[self.name]
            if not lo <= number <= hi:  # (NaN too)
                raise OutOfRange(f"{self.name} from {self.source} is not a number from {lo} to {hi}")
            return int(number)
        return self.prefix + raw

    def fit_quartiles(self, column: list[float]) -> None:
        """Thresholds at the column's quartiles over the trace (so each band holds about a quarter)."""
        if self.quartiles is None:
            return
        ordered = sorted(column) or [0.0]
        k = len(self.quartiles)
        cuts = [ordered[min(len(ordered) - 1, (len(ordered) * i) // k)] for i in range(1, k)]
        self.bands = [(float("-inf"), self.quartiles[0])] + list(zip(cuts, self.quartiles[1:], strict=True))


@dataclass
class Mapping:
    rules: dict[str, Rule]
    checkpoint_minutes: float = 5.0
    min_gpus: float = 0.0
    gpus_per_processor: float = 1.0

    def columns(self) -> list[str]:
        """The trace columns the rules read, in a fixed order."""
        return sorted({r.source for r in self.rules.values() if r.source is not None})

    def check_columns(self, known: list[str]) -> None:
        for name, rule in self.rules.items():
            if rule.source is not None and rule.source not in known:
                raise ReplayError(f"mapping: {name}.from names unknown column {rule.source!r} "
                                  f"(this trace has: {', '.join(known)})")


def load_mapping(fmt: str, path: str | None) -> Mapping:
    """The format's defaults with the file's rules over them (a rule given replaces the default's)."""
    doc: dict[str, Any] = dict(DEFAULTS.get(fmt, {}))
    if path:
        try:
            with open(path, encoding="utf-8") as f:
                given = json.load(f)
        except (OSError, ValueError) as exc:
            raise ReplayError(f"mapping {path}: {exc}") from exc
        except RecursionError:  # json's decoder recurses once per level of nesting
            raise ReplayError(f"mapping {path}: nested too deeply to be read") from None
        check_text(given, f"mapping {path}")
        if not isinstance(given, dict):
            raise ReplayError(f"mapping {path}: must be a JSON object")
        unknown = sorted(set(given) - _TOP)
        if unknown:
            raise ReplayError(f"mapping: unknown field {unknown[0]!r} (fields: {', '.join(sorted(_TOP))})")
        doc.update(given)
    rules = {name: _rule(name, doc.get(name)) for name in FIELDS}
    return Mapping(rules, checkpoint_minutes=_number(doc, "checkpoint_minutes", 5.0, MAX_DURATION_MINUTES),
                   min_gpus=_number(doc, "min_gpus", 0.0, NUMBER_LIMIT),
                   gpus_per_processor=_number(doc, "gpus_per_processor", 1.0, NUMBER_LIMIT))


def _number(doc: dict[str, Any], key: str, default: float, hi: int) -> float:
    """At most ``hi``, as the engine's documents: a checkpoint of 1e308 minutes, or 1e308 GPUs per
    processor, overflows the simulation's sums to infinity and NaN."""
    value = doc.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < math.inf:
        raise ReplayError(f"mapping: {key} must be a non-negative number")
    if value > hi:
        raise ReplayError(f"mapping: {key} must be at most {hi}, not {value}")
    return float(value)


def _rule(name: str, raw: Any) -> Rule:
    if raw is None:
        return Rule(name, value={"class": 0, "priority": 10, "checkpoint": "none", "tenant": "default"}.get(name))
    if not isinstance(raw, dict):
        raw = {"value": raw}
    unknown = sorted(set(raw) - _RULE)
    if unknown:
        raise ReplayError(f"mapping: {name}.{unknown[0]} is not a rule field ({', '.join(sorted(_RULE))})")
    if not isinstance(raw.get("map") or {}, dict):
        raise ReplayError(f"mapping: {name}.map must be an object of texts to values")
    for key in ("from", "prefix"):  # a column's name, a text put before each value
        if key in raw and not isinstance(raw[key], str):
            raise ReplayError(f"mapping: {name}.{key} must be a string, not {raw[key]!r}")
    rule = Rule(name, source=raw.get("from"), value=raw.get("value"), prefix=str(raw.get("prefix", "")),
                table={str(k): v for k, v in (raw.get("map") or {}).items()}, default=raw.get("default"))
    if rule.source is None and "value" not in raw:
        raise ReplayError(f"mapping: {name} needs 'from' or 'value'")
    bands = raw.get("bands")
    if bands == "quartiles":
        values = raw.get("band_values") or []
        if not isinstance(values, list) or len(values) < 2:
            raise ReplayError(f"mapping: {name}.band_values needs two or more values with bands 'quartiles'")
        rule.quartiles = values
    elif bands is not None:
        try:
            rule.bands = sorted((float(t), v) for t, v in bands)
            if not all(math.isfinite(t) for t, _ in rule.bands):
                raise ValueError("a threshold is not a finite number")
        except (TypeError, ValueError, OverflowError) as exc:  # (an integer past what a float holds)
            raise ReplayError(f"mapping: {name}.bands must be [[threshold, value], ...]") from exc
    for value in [rule.value, rule.default, *rule.table.values(), *(v for _, v in rule.bands or []),
                  *(rule.quartiles or [])]:
        _check_value(name, value)
    return rule


def _check_value(name: str, value: Any) -> None:
    if value is None:
        return
    if name in NUMBERS:
        lo, hi = NUMBERS[name]
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            raise ReplayError(f"mapping: {name} values must be integers from {lo} to {hi}, not {value!r}")
    elif name == "checkpoint" and value not in CHECKPOINTS:
        raise ReplayError(f"mapping: checkpoint values must be one of {', '.join(CHECKPOINTS)}, not {value!r}")
    elif name not in NUMBERS and name != "checkpoint" and not isinstance(value, str):
        raise ReplayError(f"mapping: {name} values must be strings, not {value!r}")
