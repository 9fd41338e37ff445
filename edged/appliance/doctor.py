"""The link doctor: what a person should look at although nothing is down. A leafnode remote that is
connected but has carried no message for a long time (a hub that stopped routing to us, a permission
that silently drops everything), and the creds keeper's warnings (creds that expire soon, a rotation
the hub refused: edged/leafnode/credsfile.py). Findings are shown in systemd's STATUS
line and in /healthz (`warnings`); they never fail a health check or restart edged, because a
quiet link may be a quiet site and a restart would not renew a JWT.
"""

from __future__ import annotations

import time
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from edged.server import Server

SILENT_AFTER_S = 600.0  # connected, no message either way for this long: reported (the default)


@dataclass
class DoctorSettings:
    """`edged { doctor { silent_after: 10m } }`: how long a connected link may carry nothing before the
    doctor mentions it (0 turns that finding off)."""

    silent_after: float = SILENT_AFTER_S

    @classmethod
    def from_block(cls, edged_block: dict[str, Any]) -> DoctorSettings:
        from edged.settings.config import parse_duration

        s = cls()
        block = edged_block.get("doctor") or {}
        if not isinstance(block, dict):
            raise ValueError("edged { doctor }: expected a block { }")
        for k, v in block.items():
            if k.lower() != "silent_after":
                raise ValueError(f"edged {{ doctor }}: unknown setting {k!r} (silent_after)")
            if isinstance(v, bool) or not isinstance(v, int | float | str):
                raise ValueError("edged { doctor { silent_after } } must be a duration (10m) or seconds")
            s.silent_after = parse_duration(v) if isinstance(v, str) else float(v)
            if s.silent_after < 0:
                raise ValueError("edged { doctor { silent_after } } must not be negative")
        return s


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


class LinkDoctor:
    """Per-server findings; sampled whenever asked (STATUS refresh, /healthz)."""

    def __init__(self, server: Server) -> None:
        self._server = weakref.ref(server)
        self._silence: dict[int, Silence] = {}

    def findings(self, now: float | None = None) -> list[str]:
        server = self._server()
        lm = server.leafnodes if server is not None else None
        if lm is None:
            return []
        now = time.time() if now is None else now
        assert server is not None
        silent_after = DoctorSettings.from_block(server.opts.edged).silent_after  # follows a reload
        # the creds keeper of the leafnode remotes knows their creds (expiry, a refused rotation)
        out: list[str] = list(lm.creds_warnings())
        for lk in lm.links:
            conn = lk.conn if lk.is_connected else None
            if conn is None:
                self._silence.pop(lk.index, None)
                continue
            quiet = self._silence.setdefault(lk.index, Silence()).sample(conn.cid, conn.in_msgs + conn.out_msgs, now)
            if silent_after and quiet >= silent_after:
                out.append(f"leaf {_remote_name(lk)} connected but silent for {duration_text(quiet)}")
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
