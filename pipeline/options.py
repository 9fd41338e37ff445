"""The data sources' options (strings, as Spark hands them over), checked once on the driver."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime


class PipelineError(Exception):
    """A problem the user can fix (an option, a server, a stream), said in their terms."""


_READ_KEYS = {"servers", "stream", "domain", "creds", "user", "password", "token", "tls_ca", "filter_subject",
              "start_seq", "end_seq", "start_time", "partitions", "max_msgs_per_trigger", "name", "timeout"}
_WRITE_KEYS = {"servers", "domain", "creds", "user", "password", "token", "tls_ca", "name", "timeout",
               "max_in_flight", "subject"}


def _int(opts: Mapping[str, str], key: str, default: int | None, minimum: int) -> int | None:
    raw = opts.get(key)
    if raw is None or str(raw).strip() == "":
        return default
    try:
        v = int(str(raw).strip())
    except ValueError:
        raise PipelineError(f"option {key}: want an integer, got {raw!r}") from None
    if v < minimum:
        raise PipelineError(f"option {key}: must be >= {minimum}, got {v}")
    return v


def _time(raw: str | None) -> datetime | None:
    if raw is None or str(raw).strip() == "":
        return None
    s = str(raw).strip()
    try:
        t = datetime.fromtimestamp(float(s), UTC)
    except ValueError:
        try:
            t = datetime.fromisoformat(s.replace("Z", "+00:00"))
        except ValueError:
            raise PipelineError(f"option start_time: want ISO-8601 or epoch seconds, got {raw!r}") from None
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def _check_creds(path: str) -> None:
    """A damaged .creds file said as such on the driver: nats-py would only fail while signing the
    server's nonce, with an nkeys error naming neither the option nor the file."""
    import nkeys

    from edged.security.creds import CredsError, read_creds_file

    try:
        jwt, seed = read_creds_file(path)
    except CredsError as e:
        raise PipelineError(f"option creds: {e}") from None
    if jwt.count(".") != 2:
        raise PipelineError(f"option creds: {path}: the first block is not a user JWT")
    try:
        public = nkeys.from_seed(bytearray(seed)).public_key
    except (nkeys.NkeysError, ValueError) as e:
        raise PipelineError(f"option creds: {path}: the seed is not a valid nkey seed ({e})") from None
    if not public.startswith(b"U"):
        raise PipelineError(f"option creds: {path}: the seed is not a user's (its public key starts with {public[:1].decode()})")


@dataclass(frozen=True)
class Conn:
    """How to reach a NATS server; picklable, so executors connect the way the driver did."""

    servers: tuple[str, ...]
    domain: str | None = None
    creds: str | None = None
    user: str | None = None
    password: str | None = None
    token: str | None = None
    tls_ca: str | None = None
    name: str = "edged-pipeline"
    timeout: float = 10.0

    @classmethod
    def from_options(cls, opts: Mapping[str, str]) -> Conn:
        servers = tuple(s.strip() for s in str(opts.get("servers") or "").split(",") if s.strip())
        if not servers:
            raise PipelineError("option servers is required (comma-separated NATS URLs)")
        for s in servers:
            if "://" in s and s.split("://", 1)[0] not in ("nats", "tls", "ws", "wss"):
                raise PipelineError(f"option servers: {s!r} is not a NATS URL (nats://, tls://, ws://, wss://)")
        user, password = opts.get("user"), opts.get("password")
        if (user is None) != (password is None):
            raise PipelineError("options user and password go together")
        for key in ("creds", "tls_ca"):
            path = opts.get(key)
            if path and not os.path.isfile(path):
                raise PipelineError(f"option {key}: no such file {path!r}")
        if opts.get("creds"):
            _check_creds(str(opts["creds"]))
        timeout = opts.get("timeout")
        try:
            t = float(timeout) if timeout else 10.0
        except ValueError:
            raise PipelineError(f"option timeout: want seconds, got {timeout!r}") from None
        return cls(servers=servers, domain=opts.get("domain") or None, creds=opts.get("creds") or None,
                   user=user, password=password, token=opts.get("token") or None,
                   tls_ca=opts.get("tls_ca") or None, name=opts.get("name") or "edged-pipeline", timeout=t)


@dataclass(frozen=True)
class ReadOptions:
    conn: Conn
    stream: str
    filter_subject: str | None = None
    start_seq: int | None = None
    end_seq: int | None = None
    start_time: datetime | None = None
    partitions: int = 1
    max_msgs_per_trigger: int | None = None
    extra: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_options(cls, opts: Mapping[str, str]) -> ReadOptions:
        opts = {k.lower(): v for k, v in opts.items()}
        unknown = sorted(set(opts) - _READ_KEYS - {"path"})
        if unknown:
            raise PipelineError(f"unknown option(s) {', '.join(unknown)}; known: {', '.join(sorted(_READ_KEYS))}")
        return cls(conn=Conn.from_options(opts), stream=_stream(opts), **_range(opts))


@dataclass(frozen=True)
class StoreOptions:
    path: str
    stream: str
    account: str = "$G"
    filter_subject: str | None = None
    start_seq: int | None = None
    end_seq: int | None = None
    start_time: datetime | None = None
    partitions: int = 1

    @classmethod
    def from_options(cls, opts: Mapping[str, str]) -> StoreOptions:
        opts = {k.lower(): v for k, v in opts.items()}
        known = {"path", "stream", "account", "filter_subject", "start_seq", "end_seq", "start_time", "partitions"}
        unknown = sorted(set(opts) - known)
        if unknown:
            raise PipelineError(f"unknown option(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        path = opts.get("path") or ""
        if os.path.isdir(path):  # a store_dir (or its jetstream/ directory) names the file too
            for cand in (os.path.join(path, "jetstream", "jetstream.sqlite3"), os.path.join(path, "jetstream.sqlite3")):
                if os.path.isfile(cand):
                    path = cand
                    break
        if not path or not os.path.isfile(path):
            raise PipelineError(f"option path: no edged store file at {opts.get('path')!r} "
                                "(want <store_dir>/jetstream/jetstream.sqlite3)")
        rng = _range(opts)
        rng.pop("max_msgs_per_trigger")
        return cls(path=os.path.abspath(path), stream=_stream(opts), account=opts.get("account") or "$G", **rng)


def _stream(opts: Mapping[str, str]) -> str:
    stream = (opts.get("stream") or "").strip()
    if not stream or any(c in stream for c in ". *>\t\r\n"):
        raise PipelineError(f"option stream: want a stream name, got {opts.get('stream')!r}")
    return stream


def _range(opts: Mapping[str, str]) -> dict:
    start = _int(opts, "start_seq", None, 1)
    end = _int(opts, "end_seq", None, 0)
    start_time = _time(opts.get("start_time"))
    if start is not None and start_time is not None:
        raise PipelineError("options start_seq and start_time exclude each other")
    filt = (opts.get("filter_subject") or "").strip() or None
    if filt is not None and (" " in filt or ".." in filt or filt.startswith(".") or filt.endswith(".")):
        raise PipelineError(f"option filter_subject: not a subject {filt!r}")
    return {"filter_subject": filt, "start_seq": start, "end_seq": end, "start_time": start_time,
            "partitions": _int(opts, "partitions", 1, 1) or 1,
            "max_msgs_per_trigger": _int(opts, "max_msgs_per_trigger", None, 1)}


def write_options(opts: Mapping[str, str]) -> tuple[Conn, int, str | None]:
    """The sink's connection, how many publishes it keeps in flight, and a default subject."""
    opts = {k.lower(): v for k, v in opts.items()}
    unknown = sorted(set(opts) - _WRITE_KEYS)
    if unknown:
        raise PipelineError(f"unknown option(s) {', '.join(unknown)}; known: {', '.join(sorted(_WRITE_KEYS))}")
    return Conn.from_options(opts), _int(opts, "max_in_flight", 256, 1) or 256, opts.get("subject") or None


def split_range(lo: int, hi: int, n: int) -> list[tuple[int, int]]:
    """[lo, hi] in exactly n contiguous ranges, sizes differing by at most one (empty ones: lo > hi)."""
    total = max(0, hi - lo + 1)
    out = []
    start = lo
    for i in range(n):
        size = total // n + (1 if i < total % n else 0)
        out.append((start, start + size - 1))
        start += size
    return out
