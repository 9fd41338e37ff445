"""Message schedules (`allow_msg_schedules`, nats-server 2.12): a message on a schedule subject with
`Nats-Schedule: @at <RFC 3339>`, `@every <duration>` or a cron pattern is kept (rolling up earlier schedules of its
subject) and, when due, the stream stores a message on its `Nats-Schedule-Target` with the schedule's
payload (or the last message of `Nats-Schedule-Source`), `Nats-Scheduler` and `Nats-Schedule-Next` (the
next time, or `purge`, which removes a one-shot schedule in the same commit), and the `Nats-Schedule-TTL`
as its TTL. Schedules live in the stream's own messages, so they fire whether or not a hub is reachable
and survive a restart (re-read from the store). Rules from nats-server's stream.go (processJetStreamMsg)
and scheduler.go; the cron patterns of later releases (six fields, seconds first, `@daily`..., in
`Nats-Schedule-Time-Zone`) from its cron.go."""

from __future__ import annotations

import asyncio
import datetime
import re
import time
import zoneinfo
from typing import TYPE_CHECKING, Any

from edged.goformat import format_time, parse_rfc3339
from edged.jetstream.wire.errors import api_error
from edged.log import log
from edged.routing.headers import get_header
from edged.routing.subjects import is_valid_literal_subject, subjects_overlap
from edged.settings.config import parse_duration

if TYPE_CHECKING:
    from edged.jetstream.stream import Stream

NS = 1_000_000_000
_STRIP_PREFIXES = (b"Nats-Schedule", b"Nats-Expected-", b"Nats-Msg-Id:", b"Nats-TTL:", b"Nats-Rollup:")


def _round_s(ns: int) -> int:
    """Go's Time.Round(time.Second): to the nearest second, halves away from zero."""
    return (ns + NS // 2) // NS * NS


def parse_schedule(pattern: str, tz: str | None, ts: int) -> tuple[int, bool]:
    """(when it fires in ns, repeating) for a pattern published at `ts`; ValueError for an invalid one."""
    if pattern.startswith("@at "):
        if tz is not None:
            raise ValueError("time zone")
        return parse_rfc3339(pattern[4:]), False
    if pattern.startswith("@every "):
        if tz is not None:
            raise ValueError("time zone")
        dur = parse_duration(pattern[7:])
        if dur < 1:
            raise ValueError("interval")
        step = int(dur * NS)
        nxt = _round_s(ts) + step
        now = time.time_ns()
        if nxt < now:  # missed (a restart): fire once, then keep the rhythm from now
            nxt = _round_s(now) + step
        return nxt, True
    pattern = _PREDEFINED.get(pattern, pattern)
    loc = zoneinfo.ZoneInfo(tz) if tz else datetime.UTC
    cron = Cron(pattern)
    nxt = cron.next_after(ts, loc)
    now = time.time_ns()
    if nxt < now:  # missed (a restart): once, from now
        nxt = cron.next_after(_round_s(now), loc)
    return nxt, True


_PREDEFINED = {"@yearly": "0 0 0 1 1 *", "@annually": "0 0 0 1 1 *", "@monthly": "0 0 0 1 * *",
               "@weekly": "0 0 0 * * 0", "@daily": "0 0 0 * * *", "@midnight": "0 0 0 * * *",
               "@hourly": "0 0 * * * *"}
_MONTHS = {n: i for i, n in enumerate(("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov",
                                        "dec"), 1)}
_DAYS = {n: i for i, n in enumerate(("sun", "mon", "tue", "wed", "thu", "fri", "sat"))}
# (lowest, highest, names) of: second, minute, hour, day of month, month, day of week
_BOUNDS: tuple[tuple[int, int, dict[str, int]], ...] = (
    (0, 59, {}), (0, 59, {}), (0, 23, {}), (1, 31, {}), (1, 12, _MONTHS), (0, 6, _DAYS))
_NUMBER = re.compile(r"[+-]?[0-9]+")


def _number(text: str, names: dict[str, int]) -> int:
    if text.lower() in names:
        return names[text.lower()]
    if not _NUMBER.fullmatch(text) or int(text) < 0:
        raise ValueError(f"bad number {text!r}")
    return int(text)


def _field(text: str, lo: int, hi: int, names: dict[str, int]) -> tuple[set[int], bool]:
    """The values a cron field allows, and whether it is unrestricted (`*` or `?` without a step):
    a comma list of `*`, `n`, `a-b`, each with an optional `/step` (`n/step` runs to the field's end)."""
    values: set[int] = set()
    star = False
    for part in (p for p in text.split(",") if p):
        rng, *steps = part.split("/")
        if len(steps) > 1:
            raise ValueError("too many slashes")
        bounds = rng.split("-")
        this_star = bounds[0] in ("*", "?")
        if this_star:
            a, b = lo, hi
        elif len(bounds) == 1:
            a = b = _number(bounds[0], names)
        elif len(bounds) == 2:
            a, b = _number(bounds[0], names), _number(bounds[1], names)
        else:
            raise ValueError("too many hyphens")
        step = 1
        if steps:
            step = _number(steps[0], {})
            if len(bounds) == 1 and not this_star:
                b = hi
            if step > 1:
                this_star = False
        if a < lo or b > hi or a > b or step == 0:
            raise ValueError(f"bad range {part!r}")
        values.update(range(a, b + 1, step))
        star = star or this_star
    if not values:  # nothing could ever match
        raise ValueError(f"empty field {text!r}")
    return values, star


class Cron:
    """A six-field cron pattern (seconds first) as nats-server reads it: day of month and day of week
    both restricted means either may match, otherwise both must."""

    def __init__(self, pattern: str) -> None:
        fields = pattern.split()
        if len(fields) != 6:
            raise ValueError(f"pattern requires 6 fields, got {len(fields)}")
        parsed = [_field(f, *b) for f, b in zip(fields, _BOUNDS, strict=True)]
        (self.sec, _), (self.min, _), (self.hour, _), (self.dom, dom_star), (self.mon, _), (self.dow, dow_star) = \
            parsed
        self.both_days = not (dom_star or dow_star)

    def _day_ok(self, t: datetime.datetime) -> bool:
        dom, dow = t.day in self.dom, (t.weekday() + 1) % 7 in self.dow
        return dom or dow if self.both_days else dom and dow

    def next_after(self, ts: int, loc: datetime.tzinfo) -> int:
        """The first time after `ts` (ns) the pattern matches, in ns; ValueError if none within 5 years."""
        t = datetime.datetime.fromtimestamp(ts // NS, loc).replace(microsecond=0) + _SECOND
        limit = t.year + 5
        while t.year <= limit:
            if t.month not in self.mon:
                t = (t.replace(day=1, hour=0, minute=0, second=0) + datetime.timedelta(days=32)).replace(day=1)
            elif not self._day_ok(t):
                t = t.replace(hour=0, minute=0, second=0) + datetime.timedelta(days=1)
            elif t.hour not in self.hour:
                t = t.replace(minute=0, second=0) + datetime.timedelta(hours=1)
            elif t.minute not in self.min:
                t = t.replace(second=0) + datetime.timedelta(minutes=1)
            elif t.second not in self.sec:
                t = t + _SECOND
            else:
                return int(t.timestamp()) * NS
        raise ValueError("pattern exceeds maximum range")


_SECOND = datetime.timedelta(seconds=1)


def _strip(hdr: bytes) -> bytes:
    if not hdr:
        return b"NATS/1.0\r\n\r\n"
    lines = hdr.split(b"\r\n")
    kept = [ln for i, ln in enumerate(lines) if i == 0 or not ln.startswith(_STRIP_PREFIXES)]
    out = b"\r\n".join(kept)
    return out if out.endswith(b"\r\n\r\n") else out.rstrip(b"\r\n") + b"\r\n\r\n"


class Scheduler:
    """The schedules of one stream: subject -> (sequence of its schedule message, when it fires)."""

    def __init__(self, stream: Stream) -> None:
        self.stream = stream
        self.due: dict[str, tuple[int, int]] = {}
        self.firing = False
        self._timer: asyncio.TimerHandle | None = None

    # ---- checks on publish

    def check(self, subject: str, hdr: bytes) -> bytes:
        """A client's publish: the schedule headers as nats-server checks them; returns the headers to
        store (a schedule rolls up its subject)."""
        st = self.stream
        pattern = get_header(hdr, "Nats-Schedule")
        tz = get_header(hdr, "Nats-Schedule-Time-Zone")
        if tz is not None:
            try:
                if not tz:
                    raise ValueError(tz)
                zoneinfo.ZoneInfo(tz)
            except (ValueError, zoneinfo.ZoneInfoNotFoundError):
                raise api_error("JSMessageSchedulesTimeZoneInvalidErr") from None
        if pattern:
            try:
                parse_schedule(pattern, tz, time.time_ns())
            except ValueError:
                raise api_error("JSMessageSchedulesPatternInvalidErr") from None
            ttl = get_header(hdr, "Nats-Schedule-TTL")
            if ttl:
                try:
                    st.parse_ttl(ttl)
                except ValueError:
                    raise api_error("JSMessageSchedulesTTLInvalidErr") from None
            rollup = get_header(hdr, "Nats-Schedule-Rollup")
            if rollup and rollup != "sub":
                raise api_error("JSMessageSchedulesRollupInvalidErr")
            if ttl and not st.allow_ttl:
                raise api_error("JSMessageTTLDisabledErr")
            target = get_header(hdr, "Nats-Schedule-Target") or ""
            if not target or not is_valid_literal_subject(target) or target == subject:
                raise api_error("JSMessageSchedulesTargetInvalidErr")
            source = get_header(hdr, "Nats-Schedule-Source") or ""
            if source and (source in (target, subject) or not is_valid_literal_subject(source)):
                raise api_error("JSMessageSchedulesSourceInvalidErr")
            subjects = st.config.get("subjects", [])
            if not any(subjects_overlap(s, target) for s in subjects):
                raise api_error("JSMessageSchedulesTargetInvalidErr")
            if source and not any(subjects_overlap(s, source) for s in subjects):
                raise api_error("JSMessageSchedulesSourceInvalidErr")
            have = get_header(hdr, "Nats-Rollup")
            if not have:
                hdr = hdr[:-2] + b"Nats-Rollup: sub\r\n\r\n"
            elif have != "sub":
                raise api_error("JSMessageSchedulesRollupInvalidErr")
        nxt = get_header(hdr, "Nats-Schedule-Next")
        scheduler = get_header(hdr, "Nats-Scheduler")
        if nxt:
            if nxt != "purge" or not scheduler or scheduler == subject or not is_valid_literal_subject(scheduler):
                raise api_error("JSMessageSchedulesSchedulerInvalidErr")
            last = st.store.load_last(scheduler)
            if last is not None and not get_header(last.hdr, "Nats-Schedule"):
                raise api_error("JSMessageSchedulesSchedulerInvalidErr")
        elif scheduler:
            raise api_error("JSMessageSchedulesSchedulerInvalidErr")
        if get_header(hdr, "Nats-Stream-Source"):
            raise api_error("JSMessageSourceHdrNotAllowedErr")
        return hdr

    # ---- bookkeeping after a store

    def stored(self, seq: int, subject: str, hdr: bytes | None, ts: int) -> None:
        """A message was stored: a schedule is (re)armed, a plain message on a schedule's subject ends it,
        a fired one-shot purges its schedule, a fired repeating one moves it on."""
        pattern = get_header(hdr, "Nats-Schedule") if hdr else None
        scheduler = get_header(hdr, "Nats-Scheduler") if hdr else None
        if pattern:
            try:
                when, _ = parse_schedule(pattern, get_header(hdr, "Nats-Schedule-Time-Zone"), ts)
            except ValueError:
                when = 0
            if when:
                self.due[subject] = (seq, when)
                self._arm()
        elif not scheduler:
            self.due.pop(subject, None)
        if scheduler:
            nxt = get_header(hdr, "Nats-Schedule-Next")
            if nxt == "purge":
                self.due.pop(scheduler, None)
                st = self.stream
                st.purged(scheduler, st.purge_store(scheduler)[1])
            elif nxt and scheduler in self.due:
                try:
                    self.due[scheduler] = (self.due[scheduler][0], parse_rfc3339(nxt))
                except ValueError:
                    pass
                self._arm()

    def restore(self) -> None:
        """After a restart: the schedules kept in the stream's messages."""
        st = self.stream.store
        seq = st.first_seq
        for _ in range(1_000_000):
            batch = st.read_batch(seq, None, 256)
            for m in batch:
                if m.hdr and b"Nats-Schedule:" in m.hdr:
                    self.stored(m.seq, m.subject, m.hdr, m.ts)
                elif m.hdr and b"Nats-Schedule-Next:" in m.hdr:  # a repeating schedule fired: when it is next
                    nxt = get_header(m.hdr, "Nats-Schedule-Next") or ""
                    scheduler = get_header(m.hdr, "Nats-Scheduler") or ""
                    if nxt != "purge" and scheduler in self.due:
                        try:
                            self.due[scheduler] = (self.due[scheduler][0], parse_rfc3339(nxt))
                        except ValueError:
                            pass
            if len(batch) < 256:
                break
            seq = batch[-1].seq + 1
        self._arm()

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    # ---- firing

    def _arm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self.due or self.stream.closed:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        first = min(w for _, w in self.due.values())
        delay = max(0.0, (first - time.time_ns()) / NS)
        self._timer = loop.call_later(min(delay, 3600.0), self._fire)

    def _fire(self) -> None:
        self._timer = None
        now = time.time_ns()
        st = self.stream
        for subject, (seq, when) in sorted(self.due.items(), key=lambda kv: kv[1][0]):
            if when > now or st.closed:
                continue
            m = st.store.load(seq)
            if m is None or not m.hdr:
                self.due.pop(subject, None)
                continue
            try:
                self._produce(subject, m, now)
            except Exception as e:  # a full store, limits: tried again on the next pass
                self.due[subject] = (seq, now + NS)
                log.warning("JetStream stream '%s': message schedule %s not stored: %s", st.name, subject, e)
        self._arm()

    def _produce(self, subject: str, m: Any, now: int) -> None:
        hdr = m.hdr
        pattern = get_header(hdr, "Nats-Schedule") or ""
        try:
            nxt, repeat = parse_schedule(pattern, get_header(hdr, "Nats-Schedule-Time-Zone"), now)
        except ValueError:
            self.due.pop(subject, None)
            return
        target = get_header(hdr, "Nats-Schedule-Target") or ""
        ttl = get_header(hdr, "Nats-Schedule-TTL")
        rollup = get_header(hdr, "Nats-Schedule-Rollup")
        source = get_header(hdr, "Nats-Schedule-Source")
        body_hdr, payload = hdr, m.data
        if source:
            src = self.stream.store.load_last(source)
            if src is not None:
                body_hdr, payload = src.hdr or b"", src.data
        out = _strip(body_hdr)[:-2]
        out += b"Nats-Scheduler: " + subject.encode() + b"\r\n"
        out += b"Nats-Schedule-Next: " + (format_time(nxt).encode() if repeat else b"purge") + b"\r\n"
        if ttl:
            out += b"Nats-TTL: " + ttl.encode() + b"\r\n"
        if rollup:
            out += b"Nats-Rollup: " + rollup.encode() + b"\r\n"
        if not repeat:
            self.due.pop(subject, None)
        else:
            self.due[subject] = (m.seq, nxt)
        self.firing = True
        try:
            self.stream.process(target, "", out + b"\r\n", payload)
        finally:
            self.firing = False
