"""The pure parts of the 2.12 stream features: a counter's new total and its headers (random totals,
increments and sources; broken stored values), and schedule patterns (random and malformed ones)."""

from __future__ import annotations

import datetime
import json
import time
import zoneinfo
from typing import Any, NamedTuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edged.goformat import format_time, parse_rfc3339
from edged.jetstream.publish.counters import BIG_INT, apply_incr, check_incr
from edged.jetstream.publish.schedules import Cron, parse_schedule
from edged.jetstream.wire.errors import JSApiError
from edged.routing.headers import get_header, parse_headers

NS = 1_000_000_000


class Msg(NamedTuple):
    hdr: bytes
    data: bytes


def _hdr(**kv: str) -> bytes:
    return b"NATS/1.0\r\n" + b"".join(f"{k}: {v}\r\n".encode() for k, v in kv.items()) + b"\r\n"


def _code(f: Any, *a: Any) -> int:
    with pytest.raises(JSApiError) as e:
        f(*a)
    return e.value.err_code


@settings(max_examples=200, deadline=None)
@given(st.integers(-(10**40), 10**40), st.integers(-(10**40), 10**40))
def test_increment_adds_to_the_stored_total(total: int, incr: int) -> None:
    last = Msg(b"", b'{"val":"%d"}' % total)
    hdr, payload, val = apply_incr(last, "c.a", _hdr(**{"Nats-Incr": str(incr)}), b"")
    assert val == str(total + incr) and json.loads(payload) == {"val": val}
    assert get_header(hdr, "Nats-Incr") == str(incr)


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(st.sampled_from(["A", "B"]), st.integers(0, 10**6), min_size=1))
def test_sourced_totals_add_only_what_changed(origins: dict[str, int]) -> None:
    """Each origin's total taken twice (the second time larger by 5): the sum is the origins' last totals."""
    last: Any = None
    for origin, v in origins.items():
        for total in (v, v + 5):
            src = f"{origin} 1 > > c.a"
            hdr, payload, _ = apply_incr(last, "c.a", _hdr(**{"Nats-Incr": "1", "Nats-Stream-Source": src}),
                                         b'{"val":"%d"}' % total)
            last = Msg(hdr, payload)
    assert json.loads(last.data)["val"] == str(sum(v + 5 for v in origins.values()))
    sources = json.loads(get_header(last.hdr, "Nats-Counter-Sources") or "{}")
    assert sources == {o: {"c.a": str(v + 5)} for o, v in origins.items()}
    assert len(parse_headers(last.hdr)[2]["Nats-Counter-Sources"]) == 1  # replaced, never repeated


@given(st.binary(max_size=40))
def test_a_stored_value_that_is_no_counter_is_broken_or_zero(data: bytes) -> None:
    try:
        _, _, val = apply_incr(Msg(b"", data), "c.a", _hdr(**{"Nats-Incr": "1"}), b"")
    except JSApiError as e:
        assert e.err_code == 10172
    else:
        assert BIG_INT.fullmatch(val)


def test_increment_refusals() -> None:
    assert _code(check_incr, "1.5", True, _hdr(), b"") == 10171
    assert _code(check_incr, "1", False, _hdr(), b"") == 10168
    assert _code(check_incr, "1", True, _hdr(), b"x") == 10170
    assert _code(check_incr, "1", True, _hdr(**{"Nats-Expected-Last-Sequence": "3"}), b"") == 10171
    assert _code(apply_incr, None, "c.a", _hdr(), b"") == 10169
    assert _code(apply_incr, Msg(b"", b'{"val": 5}'), "c.a", _hdr(**{"Nats-Incr": "1"}), b"") == 10172


def test_schedule_patterns() -> None:
    now = time.time_ns()
    at = parse_schedule("@at 2030-01-02T03:04:05Z", None, now)
    assert at == (1893553445 * NS, False)
    nxt, repeat = parse_schedule("@every 1m", None, now)
    assert repeat and abs(nxt - (now + 60 * NS)) <= NS
    old = now - 3600 * NS  # missed while down: once, from now
    nxt, _ = parse_schedule("@every 10s", None, old)
    assert now < nxt <= time.time_ns() + 11 * NS
    for bad in ("@at", "@at tomorrow", "@every 500ms", "@every x", "0 30 6 * *", "60 * * * * *", "* * * * * 7",
                "*/0 * * * * *", "a * * * * *", ", * * * * *", "1-2-3 * * * * *", "5-1 * * * * *", "@often", ""):
        with pytest.raises(ValueError):
            parse_schedule(bad, None, now)
    with pytest.raises(ValueError):
        parse_schedule("@at 2030-01-02T03:04:05Z", "Europe/Berlin", now)
    nxt, repeat = parse_schedule("@hourly", None, now)
    assert repeat and nxt % (3600 * NS) == 0 and 0 < nxt - now <= 3600 * NS


@given(st.text(max_size=30))
def test_random_patterns_parse_or_raise_value_error(text: str) -> None:
    try:
        when, _ = parse_schedule(text, None, time.time_ns())
    except ValueError:
        return
    assert isinstance(when, int)


@given(st.integers(0, 4102444800 * NS))
def test_at_round_trips_go_times(ns: int) -> None:
    assert parse_schedule("@at " + format_time(ns), None, 0)[0] == ns


def _t(text: str) -> int:
    return parse_rfc3339(text)


@pytest.mark.parametrize(("pattern", "tz", "after", "want"), [
    ("0 30 6 * * *", None, "2026-11-26T10:00:00Z", "2026-11-27T06:30:00Z"),
    ("0 0 0 * * mon", None, "2026-11-26T10:00:00Z", "2026-11-30T00:00:00Z"),
    ("0 0 12 1,15 * *", None, "2026-11-26T10:00:00Z", "2026-12-01T12:00:00Z"),
    ("0 0 0 13 * 5", None, "2026-11-26T10:00:00Z", "2026-11-27T00:00:00Z"),  # the 13th or a Friday
    ("0 0 0 * JAN *", None, "2026-11-26T10:00:00Z", "2027-01-01T00:00:00Z"),
    ("*/15 * * * * *", None, "2026-11-26T10:00:07Z", "2026-11-26T10:00:15Z"),
    ("30/10 * * * * *", None, "2026-11-26T10:00:55Z", "2026-11-26T10:01:30Z"),
    ("0 0 6 * * *", "Europe/Berlin", "2026-11-26T10:00:00Z", "2026-11-27T05:00:00Z"),
    ("0 0 0 29 2 *", None, "2026-11-26T10:00:00Z", "2028-02-29T00:00:00Z"),
])
def test_cron_next_times(pattern: str, tz: str | None, after: str, want: str) -> None:
    loc = zoneinfo.ZoneInfo(tz) if tz else datetime.UTC
    assert Cron(pattern).next_after(_t(after), loc) == _t(want)


_FIELD = st.one_of(st.just("*"), st.integers(0, 5).map(str), st.tuples(st.integers(0, 3), st.integers(1, 4)).map(
    lambda t: f"*/{t[1]}" if t[0] == 0 else f"{t[0]}-{t[0] + 2}"))


@settings(max_examples=100, deadline=None)
@given(st.lists(_FIELD, min_size=6, max_size=6), st.integers(1_700_000_000, 2_000_000_000))
def test_cron_next_matches_every_field(fields: list[str], secs: int) -> None:
    fields[3] = "*" if fields[3] == "0" else fields[3]  # day of month starts at 1
    fields[4] = "*" if fields[4] == "0" else fields[4]
    pattern = " ".join(fields)
    try:
        cron = Cron(pattern)
        got = cron.next_after(secs * NS, datetime.UTC)
    except ValueError:
        return
    t = datetime.datetime.fromtimestamp(got // NS, datetime.UTC)
    assert got > secs * NS
    assert t.second in cron.sec and t.minute in cron.min and t.hour in cron.hour and t.month in cron.mon
    assert cron._day_ok(t)
