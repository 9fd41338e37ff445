"""gojson.go_time, Go's time.Time JSON decoding: the instant it parses and the text Go renders it as
(RFC3339Nano in the zone it was given). Its rendering must be goformat.format_time's for that instant and
offset, and its instant parse_rfc3339's, for any valid time."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from edged.goformat import format_time, parse_rfc3339
from edged.jetstream.wire.errors import JSApiError
from edged.jetstream.wire.gojson import go_time

_offsets = st.one_of(st.just(None), st.integers(-23 * 60 - 59, 23 * 60 + 59).map(lambda m: m * 60))


@given(st.integers(1970, 9999), st.integers(1, 12), st.integers(1, 28), st.integers(0, 23), st.integers(0, 59),
       st.integers(0, 59), st.text("0123456789", max_size=12), _offsets, st.sampled_from(".,"))
def test_rendering_is_format_time_of_the_instant(y: int, mo: int, d: int, h: int, mi: int, s: int, frac: str,
                                                  offset: int | None, sep: str) -> None:
    if offset is None:
        zone = "Z"
    else:
        a = abs(offset)
        zone = f"{'+' if offset >= 0 else '-'}{a // 3600:02d}:{a % 3600 // 60:02d}"
    text = f"{y:04d}-{mo:02d}-{d:02d}T{h:02d}:{mi:02d}:{s:02d}" + (sep + frac if frac else "") + zone
    ns, rendered = go_time(text)
    assert rendered == format_time(ns, offset or 0)
    if sep == ".":
        assert ns == parse_rfc3339(text)


def test_renderings_go_gives() -> None:
    assert go_time("2024-01-02T03:04:05.120000+01:30")[1] == "2024-01-02T03:04:05.12+01:30"
    assert go_time("2024-01-02T03:04:05+00:00")[1] == "2024-01-02T03:04:05Z"
    assert go_time("2024-01-02T03:04:05,5Z")[1] == "2024-01-02T03:04:05.5Z"
    assert go_time("2024-01-02T03:04:05.1234567891Z")[1] == "2024-01-02T03:04:05.123456789Z"


@pytest.mark.parametrize("text", ["2024-02-30T00:00:00Z", "2024-01-02T03:04:05", "2024-13-01T00:00:00Z"])
def test_invalid_times_are_go_errors(text: str) -> None:
    with pytest.raises(JSApiError):
        go_time(text)
