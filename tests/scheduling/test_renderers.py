"""The API's JSON renderer writes what DRF's own renderer writes."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import uuid
from zoneinfo import ZoneInfo

from django.utils.translation import gettext_lazy
from rest_framework.renderers import JSONRenderer as DrfRenderer
from rest_framework.utils.serializer_helpers import ReturnDict, ReturnList

from scheduling.api.renderers import JSONRenderer

UTC = dt.UTC
SAMPLE = {
    "utc": dt.datetime(2026, 11, 24, 9, 15, 47, 123456, tzinfo=UTC),
    "utc whole second": dt.datetime(2026, 11, 24, 9, 15, 47, tzinfo=UTC),
    "zoneinfo utc": dt.datetime(2026, 11, 24, 9, 15, tzinfo=ZoneInfo("UTC")),
    "berlin": dt.datetime(2026, 7, 1, 12, 0, tzinfo=ZoneInfo("Europe/Berlin")),
    "naive": dt.datetime(2026, 1, 2, 3, 4, 5),
    "date": dt.date(2026, 2, 3),
    "time": dt.time(4, 5, 6),
    "duration": dt.timedelta(minutes=90, microseconds=5),
    "decimal": decimal.Decimal("2.50"),
    "uuid": uuid.UUID("12345678-1234-5678-1234-567812345678"),
    "lazy": gettext_lazy("Only operators may do this."),
    "floats": [0.1, 1e-07, 1e16, -0.0, 3.0],
    "ints": {1: "int keys", 2: True},
    "text": "naïve “quotes” \u2028 and \u2029 and </script>",
    "nested": ReturnList([ReturnDict({"a": [None, False, {"b": []}]}, serializer=None)], serializer=None),
    "big": 2**62,
}


def test_output_reads_back_as_drfs_does():
    ours, theirs = JSONRenderer().render(SAMPLE), DrfRenderer().render(SAMPLE)
    assert json.loads(ours) == json.loads(theirs)


def test_datetimes_are_written_as_drf_writes_them():
    for key in ("utc", "utc whole second", "zoneinfo utc", "berlin", "naive", "date", "time"):
        data = {key: SAMPLE[key]}
        assert JSONRenderer().render(data) == DrfRenderer().render(data), key


def test_line_and_paragraph_separators_are_escaped_for_javascript():
    out = JSONRenderer().render({"text": "a\u2028b\u2029c"})
    assert out == b'{"text":"a\\u2028b\\u2029c"}'


def test_indented_output_is_drfs():
    media = "application/json; indent=4"
    assert JSONRenderer().render(SAMPLE, media) == DrfRenderer().render(SAMPLE, media)


def test_nothing_renders_as_an_empty_body():
    assert JSONRenderer().render(None) == b""
