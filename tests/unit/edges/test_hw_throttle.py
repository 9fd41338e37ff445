"""The firmware's get_throttled word: every documented bit, both text forms (vcgencmd and sysfs), and any
input (random, truncated) either decodes or is a ThrottleParseError."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hw.throttle import BITS, KNOWN_MASK, ThrottleParseError, decode, parse


def test_each_documented_bit() -> None:
    names = {0: "under_voltage", 1: "arm_freq_capped", 2: "throttled", 3: "soft_temp_limit",
             16: "under_voltage_occurred", 17: "arm_freq_capped_occurred", 18: "throttled_occurred",
             19: "soft_temp_limit_occurred"}
    assert BITS == names
    for bit, name in names.items():
        t = decode(1 << bit)
        assert t.active == [name]
        assert [k for k, v in t.flags().items() if v] == [name]
        assert t.problem_now == (bit < 16)


def test_the_usual_under_voltage_word() -> None:
    t = parse("throttled=0x50005\n")
    assert t.raw == 0x50005
    assert t.active == ["under_voltage", "throttled", "under_voltage_occurred", "throttled_occurred"]
    assert t.as_dict()["raw"] == "0x50005" and t.unknown_bits == 0


@pytest.mark.parametrize("text", ["50005", "0x50005", "50005\n", b"50005\x00", "throttled = 0x50005", "0X50005"])
def test_both_text_forms(text: str | bytes) -> None:
    assert parse(text).raw == 0x50005


def test_all_clear_and_unknown_bits_kept() -> None:
    assert parse("throttled=0x0").active == []
    t = decode(0x80000100)
    assert t.active == [] and t.unknown_bits == 0x80000100


@pytest.mark.parametrize("text", ["", "throttled=", "0x", "zz", "throttled=0x1ffffffff", "-1", "1 2"])
def test_not_a_word(text: str) -> None:
    with pytest.raises(ThrottleParseError):
        parse(text)


@given(st.integers(min_value=0, max_value=0xFFFFFFFF))
def test_any_word_round_trips_through_both_forms(n: int) -> None:
    for text in (f"throttled=0x{n:x}", f"{n:x}\n"):
        t = parse(text)
        assert t.raw == n
        rebuilt = sum(1 << bit for bit, name in BITS.items() if t.flags()[name]) | t.unknown_bits
        assert rebuilt == n and t.unknown_bits == n & ~KNOWN_MASK


@given(st.one_of(st.text(max_size=40), st.binary(max_size=40)))
def test_random_input_decodes_or_says_why(text: str | bytes) -> None:
    try:
        t = parse(text)
    except ThrottleParseError:
        return
    assert 0 <= t.raw <= 0xFFFFFFFF


@given(st.integers(min_value=0, max_value=0xFFFFFFFF), st.integers(min_value=0, max_value=30))
def test_truncated_vcgencmd_output(n: int, cut: int) -> None:
    text = f"throttled=0x{n:x}"[:cut]
    try:
        t = parse(text)
    except ThrottleParseError:
        return
    assert t.raw <= n or n == 0
