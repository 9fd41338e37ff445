"""The Raspberry Pi firmware's `get_throttled` bits, decoded (sans-I/O: text or an int in, flags out).

The firmware reports a 32-bit word (`vcgencmd get_throttled` prints `throttled=0x50005`; the
firmware driver's sysfs file prints the same word in hex without the prefix). The low half is what
holds now, bits 16.. what has happened since boot.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# bit -> name, as the firmware documents them
BITS: dict[int, str] = {
    0: "under_voltage",
    1: "arm_freq_capped",
    2: "throttled",
    3: "soft_temp_limit",
    16: "under_voltage_occurred",
    17: "arm_freq_capped_occurred",
    18: "throttled_occurred",
    19: "soft_temp_limit_occurred",
}
KNOWN_MASK = sum(1 << b for b in BITS)
_TEXT = re.compile(r"^\s*(?:throttled\s*=\s*)?(0[xX])?([0-9a-fA-F]{1,8})\s*$")


class ThrottleParseError(ValueError):
    """Text that is not a get_throttled word."""


@dataclass(frozen=True)
class Throttled:
    raw: int

    def flags(self) -> dict[str, bool]:
        """Every documented flag, set or not."""
        return {name: bool(self.raw >> bit & 1) for bit, name in BITS.items()}

    @property
    def active(self) -> list[str]:
        return [name for bit, name in BITS.items() if self.raw >> bit & 1]

    @property
    def unknown_bits(self) -> int:
        """Bits the firmware set that are not documented (kept, so nothing is silently lost)."""
        return self.raw & ~KNOWN_MASK

    @property
    def problem_now(self) -> bool:
        return bool(self.raw & 0xF)

    def as_dict(self) -> dict[str, object]:
        return {"raw": f"0x{self.raw:x}", **self.flags(), "unknown_bits": f"0x{self.unknown_bits:x}"}


def decode(raw: int) -> Throttled:
    if not 0 <= raw <= 0xFFFFFFFF:
        raise ThrottleParseError(f"get_throttled word out of range: {raw}")
    return Throttled(raw)


def parse(text: str | bytes) -> Throttled:
    """`throttled=0x50005` (vcgencmd), `50005` or `0x50005` (sysfs) -> the decoded word. Both sources
    print hex, with or without `0x`."""
    if isinstance(text, bytes):
        text = text.decode("ascii", "replace")
    m = _TEXT.match(text.replace("\x00", ""))
    if not m:
        raise ThrottleParseError(f"not a get_throttled value: {text[:40]!r}")
    return decode(int(m.group(2), 16))
