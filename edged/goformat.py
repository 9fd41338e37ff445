"""Go's text forms of times and durations, as nats-server prints them in JSON and headers.

One implementation each, shared by monitoring, leafnode reports and JetStream: tools written for
nats-server parse these strings, so they must match Go's `time` package byte for byte.
"""

from __future__ import annotations

import calendar
import re
import time

NS = 1_000_000_000
ZERO_TIME = "0001-01-01T00:00:00Z"  # Go's zero time.Time, what nats-server prints for "never"

_RFC3339 = re.compile(r"(\d{4})-(\d\d)-(\d\d)[Tt](\d\d):(\d\d):(\d\d)(?:\.(\d+))?(Z|z|[+-]\d\d:\d\d)")


def format_time(ns: int, offset: int = 0) -> str:
    """Go's RFC3339Nano: trailing zeros of the fraction dropped, the zone as given (UTC is `Z`)."""
    secs, frac = divmod(ns, NS)
    y, mo, d, h, mi, s = time.gmtime(secs + offset)[:6]
    f = f"{frac:09d}".rstrip("0")
    a = abs(offset)
    zone = "Z" if offset == 0 else f"{'+' if offset > 0 else '-'}{a // 3600:02d}:{a % 3600 // 60:02d}"
    return f"{y:04d}-{mo:02d}-{d:02d}T{h:02d}:{mi:02d}:{s:02d}" + (f".{f}" if f else "") + zone


def rfc3339ns(ns: int) -> str:
    """A time in ns since the epoch as Go's JSON time.Time (UTC); 0 or less is Go's zero time."""
    if ns <= 0:
        return ZERO_TIME
    return format_time(ns)


def rfc3339(t: float | None) -> str:
    """A time.time() float as Go's JSON time.Time (UTC); None, 0 or less is Go's zero time."""
    if t is None or t <= 0:
        return ZERO_TIME
    secs = int(t)
    frac = round((t - secs) * 1e9)  # split first: t * 1e9 would lose the fraction's precision
    return format_time(secs * NS + frac)


def parse_rfc3339(text: str) -> int:
    """ns since the epoch from an RFC 3339 time with up to 9 fractional digits (more are cut, as Go does)."""
    m = _RFC3339.fullmatch(text.strip())
    if not m:
        raise ValueError(f"invalid time {text!r}")
    y, mo, d, h, mi, s = (int(m.group(i)) for i in range(1, 7))
    frac = int((m.group(7) or "0")[:9].ljust(9, "0"))
    secs = calendar.timegm((y, mo, d, h, mi, s, 0, 0, 0))
    tz = m.group(8)
    if tz not in ("Z", "z"):
        sign = 1 if tz[0] == "+" else -1
        secs -= sign * (int(tz[1:3]) * 3600 + int(tz[4:6]) * 60)
    return secs * NS + frac


def _fmt_frac(v: int, prec: int) -> str:
    """v / 10**prec with trailing zeros (and a bare point) removed, as Go's Duration.String does."""
    whole, frac = divmod(v, 10**prec)
    if not frac:
        return str(whole)
    return f"{whole}.{frac:0{prec}d}".rstrip("0")


def go_duration(ns: int) -> str:
    """Go's time.Duration.String(): "0s", "729µs", "1.5ms", "2m3.25s", "1h0m0s"."""
    ns = int(ns)
    if ns == 0:
        return "0s"
    neg = ns < 0
    u = -ns if neg else ns
    if u < NS:
        if u < 1_000:
            s = f"{u}ns"
        elif u < 1_000_000:
            s = _fmt_frac(u, 3) + "µs"
        else:
            s = _fmt_frac(u, 6) + "ms"
    else:
        h, rem = divmod(u, 3600 * NS)
        m, rem = divmod(rem, 60 * NS)
        sec = _fmt_frac(rem, 9) + "s"
        if h:
            s = f"{h}h{m}m{sec}"
        elif m:
            s = f"{m}m{sec}"
        else:
            s = sec
    return "-" + s if neg else s


def uptime_text(seconds: float) -> str:
    """nats-server's myUptime: whole seconds with y/d/h/m/s units, e.g. "1m2s", "3d4h0m1s"."""
    tsecs = max(0, int(seconds))
    tmins, thrs = tsecs // 60, tsecs // 3600
    tdays = thrs // 24
    tyrs = tdays // 365
    if tyrs > 0:
        return f"{tyrs}y{tdays % 365}d{thrs % 24}h{tmins % 60}m{tsecs % 60}s"
    if tdays > 0:
        return f"{tdays}d{thrs % 24}h{tmins % 60}m{tsecs % 60}s"
    if thrs > 0:
        return f"{thrs}h{tmins % 60}m{tsecs % 60}s"
    if tmins > 0:
        return f"{tmins}m{tsecs % 60}s"
    return f"{tsecs}s"


def rtt_text(rtt_seconds: float) -> str:
    """A connection's RTT as nats-server's getRTT prints it: whole µs between 1µs and 1ms, else exact ns."""
    ns = int(rtt_seconds * 1e9)
    if 1_000 < ns < 1_000_000:
        ns -= ns % 1_000
    return go_duration(ns)
