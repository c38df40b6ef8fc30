"""One duration syntax everywhere: numbers with units, largest first, Google's JSON form included."""

from __future__ import annotations

from datetime import timedelta

import pytest
from pydantic import TypeAdapter

from mldiag.domain.types import Duration, bounded_duration, format_duration, human_duration, parse_duration


@pytest.mark.parametrize(("given", "expected"), [
    ("2s", timedelta(seconds=2)),
    ("3.5s", timedelta(seconds=3.5)),  # Google's JSON mapping
    ("3.000001s", timedelta(seconds=3, microseconds=1)),
    ("1500ms", timedelta(milliseconds=1500)),
    ("1ms", timedelta(milliseconds=1)),
    ("10m", timedelta(minutes=10)),
    ("1.5m", timedelta(seconds=90)),
    ("1h30m", timedelta(minutes=90)),
    ("7d", timedelta(days=7)),
    ("1d12h", timedelta(hours=36)),
    ("1d2h3m4s5ms", timedelta(days=1, hours=2, minutes=3, seconds=4, milliseconds=5)),
    (" 2s ", timedelta(seconds=2)),
    ("0s", timedelta(0)),
    (3, timedelta(seconds=3)),  # a JSON number is seconds
    (2.5, timedelta(seconds=2.5)),
    (timedelta(hours=1), timedelta(hours=1)),
])
def test_durations_are_read(given, expected):
    assert parse_duration(given) == expected


@pytest.mark.parametrize(("given", "reason"), [
    ("0.25", "not a duration: '0.25' (numbers with units ms, s, m, h or d"),
    ("8 days", "not a duration: '8 days'"),
    ("30m1h", "not a duration: '30m1h'"),  # largest unit first
    ("1m1m", "not a duration: '1m1m'"),
    ("1H", "not a duration: '1H'"),
    ("-5s", "not a duration: '-5s'"),
    ("1e308", "not a duration: '1e308'"),
    ("", "not a duration: ''"),
    ("s", "not a duration: 's'"),
    (-5, "not a duration: -5 (durations are not negative)"),
    (float("nan"), "not a duration: nan"),
    (float("inf"), "not a duration: inf"),
    (True, "not a duration: True"),
    (None, "not a duration: None"),
    ("99999999999999999s", "too long a duration: '99999999999999999s' (at most 3652500d)"),
    (1e308, "too long a duration: 1e+308 (at most 3652500d)"),
    (10**400, "too long a duration"),
    ("3652501d", "too long a duration: '3652501d'"),
])
def test_anything_else_is_a_one_line_value_error(given, reason):
    with pytest.raises(ValueError) as error:
        parse_duration(given)
    assert str(error.value).startswith(reason) and "\n" not in str(error.value)


def test_the_longest_duration_is_read():
    assert parse_duration("3652500d") == timedelta(days=3_652_500)


@pytest.mark.parametrize(("value", "text"), [
    (timedelta(0), "0s"),
    (timedelta(milliseconds=100), "100ms"),
    (timedelta(microseconds=1500), "0.0015s"),
    (timedelta(seconds=2), "2s"),
    (timedelta(seconds=2.5), "2.5s"),
    (timedelta(seconds=61.5), "1m1.5s"),
    (timedelta(minutes=1), "1m"),
    (timedelta(minutes=5), "5m"),
    (timedelta(minutes=90), "1h30m"),
    (timedelta(hours=1), "1h"),
    (timedelta(days=7), "7d"),
    (timedelta(days=1, seconds=1), "1d1s"),
    (timedelta(seconds=-90), "-1m30s"),
])
def test_durations_are_written_as_they_are_read(value, text):
    assert human_duration(value) == text
    if value >= timedelta(0):
        assert parse_duration(text) == value


def test_the_wire_form_is_googles():
    assert format_duration(timedelta(milliseconds=1500)) == "1.500s"
    assert TypeAdapter(Duration).dump_python(parse_duration("1h30m"), mode="json") == "5400.000s"
    assert TypeAdapter(Duration).validate_python("5400.000s") == timedelta(minutes=90)


@pytest.mark.parametrize(("value", "reason"), [
    (timedelta(seconds=30), "must be at least 1m"),
    (timedelta(days=8), "must be at most 7d"),
])
def test_bounds_are_named_in_the_syntax(value, reason):
    with pytest.raises(ValueError, match=f"^{reason}$"):
        bounded_duration(value, timedelta(minutes=1), timedelta(days=7))
    assert bounded_duration(timedelta(days=7), timedelta(minutes=1), timedelta(days=7)) == timedelta(days=7)
