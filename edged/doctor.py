"""The link doctor: what a person should look at although nothing is down. A leafnode remote that is
connected but has carried no message for a long time (a hub that stopped routing to us, a permission
that silently drops everything), and creds that expire soon. Findings are shown in systemd's STATUS
line and in /healthz (`warnings`); they never fail a health check or restart edged, because a
quiet link may be a quiet site and a restart would not renew a JWT.
"""

from __future__ import annotations

import os
import time
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from edged.creds import CredsError, read_creds_file
from edged.jwt import JWTError, decode

if TYPE_CHECKING:
    from edged.server import Server

SILENT_AFTER_S = 600.0  # connected, no message either way for this long: reported
CREDS_WARN_S = 7 * 86400.0  # creds whose JWT expires within this: reported


def duration_text(s: float) -> str:
    """A short duration for a status line: 45s, 12m, 5h, 3d."""
    s = max(s, 0.0)
    if s < 120:
        return f"{s:.0f}s"
    if s < 7200:
        return f"{s / 60:.0f}m"
    if s < 172800:
        return f"{s / 3600:.0f}h"
    return f"{s / 86400:.0f}d"


@dataclass
class Silence:
    """How long a link's message counters have stood still, from the samples it is shown."""

    conn_id: int = -1
    count: int = -1
    since: float = 0.0

    def sample(self, conn_id: int, count: int, now: float) -> float:
        """Seconds without a message; a new connection or a counter that moved starts over at 0."""
        if conn_id != self.conn_id or count != self.count:
            self.conn_id, self.count, self.since = conn_id, count, now
        return now - self.since


def creds_expiry(path: str, cache: dict[str, tuple[float, float | None]] | None = None) -> float | None:
    """The `exp` (UNIX seconds) of the user JWT in a .creds file, None for no expiry; the file is read
    again only when its mtime changes. Raises CredsError for a file that cannot be read or parsed."""
    try:
        mtime = os.stat(path).st_mtime
    except OSError as e:
        raise CredsError(f"cannot read credentials file {path!r}: {e.strerror}") from None
    if cache is not None and path in cache and cache[path][0] == mtime:
        return cache[path][1]
    token, _ = read_creds_file(path)
    try:
        exp = decode(token).get("exp")
    except JWTError as e:
        raise CredsError(f"{path}: user JWT malformed: {e}") from None
    value = float(exp) if exp else None
    if cache is not None:
        cache[path] = (mtime, value)
    return value


def expiry_finding(path: str, exp: float | None, now: float, warn_s: float = CREDS_WARN_S) -> str:
    """The line for creds expiring within `warn_s` (or expired), "" otherwise."""
    if exp is None:
        return ""
    left = exp - now
    if left <= 0:
        return f"creds {path} expired {duration_text(-left)} ago"
    if left <= warn_s:
        return f"creds {path} expire in {duration_text(left)}"
    return ""


class LinkDoctor:
    """Per-server findings; sampled whenever asked (STATUS refresh, /healthz)."""

    def __init__(self, server: Server, silent_after: float = SILENT_AFTER_S, creds_warn: float = CREDS_WARN_S) -> None:
        self._server = weakref.ref(server)
        self.silent_after = silent_after
        self.creds_warn = creds_warn
        self._silence: dict[int, Silence] = {}
        self._creds: dict[str, tuple[float, float | None]] = {}

    def findings(self, now: float | None = None) -> list[str]:
        server = self._server()
        lm = server.leafnodes if server is not None else None
        if lm is None:
            return []
        now = time.time() if now is None else now
        out: list[str] = []
        # the creds manager of a leafnode (fleet provisioning) knows its creds best: its words, not ours
        creds_warnings = getattr(lm, "creds_warnings", None)
        if creds_warnings is not None:
            out += creds_warnings()
        for lk in lm.links:
            name = _remote_name(lk)
            conn = lk.conn if lk.is_connected else None
            if conn is not None:
                quiet = self._silence.setdefault(lk.index, Silence()).sample(
                    conn.cid, conn.in_msgs + conn.out_msgs, now)
                if quiet >= self.silent_after:
                    out.append(f"leaf {name} connected but silent for {duration_text(quiet)}")
            else:
                self._silence.pop(lk.index, None)
            path = getattr(lk.remote, "credentials", "")
            if path and creds_warnings is None:
                try:
                    f = expiry_finding(path, creds_expiry(path, self._creds), now, self.creds_warn)
                except CredsError as e:
                    f = str(e)
                if f:
                    out.append(f)
        return out


def _remote_name(lk: Any) -> str:
    c = lk.conn
    if c is not None and lk.is_connected:
        return c.url.hostport
    return lk.urls[0].hostport if lk.urls else f"#{lk.index + 1}"


_DOCTORS: weakref.WeakKeyDictionary[Server, LinkDoctor] = weakref.WeakKeyDictionary()


def doctor_of(server: Server) -> LinkDoctor:
    d = _DOCTORS.get(server)
    if d is None:
        d = _DOCTORS[server] = LinkDoctor(server)
    return d
