"""Go's time and duration texts (edged/goformat.py) against Python's own datetime and edged's config parser.

Known values come from Go's time package documentation and from nats-server output; the properties
check the forms against independent readers (datetime, a regex, edged.settings.config.parse_duration).
"""

from __future__ import annotations

import datetime as dt
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from edged import goformat as G
from edged.settings.config import parse_duration

NS = 1_000_000_000
_GO_TIME = re.compile(r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d)")
# 0001-01-01 .. 9999-12-31 in ns since the epoch, positive part only (non-positive is the zero time)
_MAX_NS = 253402300799 * NS + NS - 1


def _datetime_text(ns: int) -> str:
    """The same instant through datetime (an independent calendar), fraction trimmed as Go trims it."""
    secs, frac = divmod(ns, NS)
    base = (dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=secs)).strftime("%Y-%m-%dT%H:%M:%S")
    f = f"{frac:09d}".rstrip("0")
    return base + (f".{f}" if f else "") + "Z"


@given(st.integers(min_value=1, max_value=_MAX_NS))
def test_rfc3339ns_agrees_with_datetime_and_parses_back(ns):
    text = G.rfc3339ns(ns)
    assert _GO_TIME.fullmatch(text), text
    assert text == _datetime_text(ns)
    assert G.parse_rfc3339(text) == ns


@given(st.integers(min_value=-(10**20), max_value=0))
def test_non_positive_times_are_go_zero_time(ns):
    assert G.rfc3339ns(ns) == "0001-01-01T00:00:00Z"
    assert G.rfc3339(ns / NS) == "0001-01-01T00:00:00Z"


def test_rfc3339_none_is_zero_time():
    assert G.rfc3339(None) == G.ZERO_TIME == "0001-01-01T00:00:00Z"


@given(st.integers(min_value=1, max_value=4_000_000_000), st.integers(min_value=0, max_value=999_999))
def test_float_seconds_and_ns_forms_agree(secs, micros):
    """rfc3339 (time.time() floats) and rfc3339ns (time.time_ns()) are one format: the same instant to the
    float's precision, and the same text where the float is exact."""
    ns = secs * NS + micros * 1000
    assert abs(G.parse_rfc3339(G.rfc3339(secs + micros / 1e6)) - ns) < 1000
    assert G.rfc3339(float(secs)) == G.rfc3339ns(secs * NS)
    assert G.rfc3339(secs + 0.5) == G.rfc3339ns(secs * NS + NS // 2)


def test_rfc3339_fraction_rounding_never_prints_a_billion():
    # 0.9999999999 of a second rounds up to the next whole second, not to ".1000000000"
    assert G.rfc3339(1700000000.9999999999) in ("2023-11-14T22:13:21Z", "2023-11-14T22:13:20.999999999Z")


@given(st.integers(min_value=1, max_value=4_000_000_000 * NS),
       st.integers(min_value=-14 * 60, max_value=14 * 60).map(lambda m: m * 60))
def test_format_time_with_zone_is_the_same_instant(ns, offset):
    text = G.format_time(ns, offset)
    m = _GO_TIME.fullmatch(text)
    assert m, text
    if offset == 0:
        assert m.group(8) == "Z"
    assert G.parse_rfc3339(text) == ns
    parsed = dt.datetime.fromisoformat(text.replace("Z", "+00:00")[:19] + m.group(8).replace("Z", "+00:00"))
    assert parsed.utcoffset() == dt.timedelta(seconds=offset)


@pytest.mark.parametrize("text,ns", [
    ("2023-11-14T22:13:20Z", 1700000000 * NS),
    ("2023-11-14T22:13:20.25Z", 1700000000 * NS + 250_000_000),
    ("2023-11-14t22:13:20.123456789123z", 1700000000 * NS + 123_456_789),  # extra digits cut, as Go does
    ("2023-11-15T00:13:20+02:00", 1700000000 * NS),
    (" 2023-11-14T20:13:20.5-02:00 ", 1700000000 * NS + 500_000_000),
])
def test_parse_rfc3339_known_values(text, ns):
    assert G.parse_rfc3339(text) == ns


@pytest.mark.parametrize("text", ["", "2023-11-14", "2023-11-14T22:13:20", "2023-11-14 22:13:20Z",
                                  "2023-11-14T22:13:20.Z", "2023-11-14T22:13:20+0200", "x2023-11-14T22:13:20Z"])
def test_parse_rfc3339_refuses_malformed(text):
    with pytest.raises(ValueError):
        G.parse_rfc3339(text)


@given(st.integers(min_value=-(10**18), max_value=10**18))
def test_go_duration_reads_back_through_the_config_parser(ns):
    """edged's own time.ParseDuration reader accepts every text and lands on the same value."""
    text = G.go_duration(ns)
    assert re.fullmatch(r"-?(\d+h)?(\d+m)?(\d+(\.\d*[1-9])?(ns|µs|ms|s))", text) or text == "0s", text
    assert parse_duration(text) == pytest.approx(ns / NS, rel=1e-12, abs=1e-12)


@pytest.mark.parametrize("ns,text", [
    (0, "0s"), (1, "1ns"), (1_100, "1.1µs"), (2_200_000, "2.2ms"), (3_300_000_000, "3.3s"),
    (4 * 60 * NS + 5 * NS, "4m5s"), (4 * 3600 * NS + 5 * 60 * NS + 6_700_000_000, "4h5m6.7s"),
    (-(3600 * NS), "-1h0m0s"), (2**63 - 1, "2562047h47m16.854775807s"), (-(2**63), "-2562047h47m16.854775808s"),
])
def test_go_duration_go_documented_values(ns, text):
    assert G.go_duration(ns) == text


@given(st.floats(min_value=0, max_value=10.0, allow_nan=False))
def test_rtt_text_keeps_microseconds_only_below_a_millisecond(rtt):
    ns = int(rtt * 1e9)
    text = G.rtt_text(rtt)
    if 1_000 < ns < 1_000_000:
        assert text.endswith("µs") and "." not in text
        assert text == f"{ns // 1000}µs"
    else:
        assert text == G.go_duration(ns)


@given(st.integers(min_value=0, max_value=10**10))
def test_uptime_text_counts_whole_seconds(secs):
    text = G.uptime_text(secs + 0.999)
    m = re.fullmatch(r"(?:(\d+)y)?(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(\d+)s", text)
    assert m, text
    y, d, h, mi, s = (int(x or 0) for x in m.groups())
    assert y * 365 * 86400 + d * 86400 + h * 3600 + mi * 60 + s == secs
    assert d < 365 and h < 24 and mi < 60 and s < 60
    assert G.uptime_text(-secs - 1) == "0s"
