"""The credentials a leafnode remote logs in with, and their rotation without a restart.

A remote's `.creds` file is read once and then watched (its size, mtime and inode, polled; a SIGHUP
re-reads it at once). New creds are only a candidate: the link is closed so the next dial uses them,
and they become the creds to keep once the hub accepts them. If the hub refuses them (an
authorization error), the link goes back to the last creds the hub accepted and says so (log,
/varz, `edged status`); the refused file is not tried again until it changes. The file on disk is
left as it is: edged runs with /etc read-only and the operator (or `edged provision`) owns it.
"""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass
from typing import Any

from edged.log import log
from edged.security.creds import CredsError, read_creds_file
from edged.security.jwt import JWTError, decode
from edged.settings.config import parse_duration

DEFAULT_WATCH_INTERVAL = 2.0
DEFAULT_EXPIRY_WARNING_DAYS = 30


@dataclass(frozen=True)
class Creds:
    jwt: str
    seed: bytes
    fingerprint: str
    user: str  # the user's public key (the JWT's subject)
    expires: int  # Unix time, 0 = never


@dataclass
class CredsSettings:
    """`edged { creds { watch_interval: 2s, expiry_warning_days: 30 } }`."""

    watch_interval: float = DEFAULT_WATCH_INTERVAL
    expiry_warning_days: float = DEFAULT_EXPIRY_WARNING_DAYS

    @classmethod
    def from_block(cls, edged_block: dict[str, Any]) -> CredsSettings:
        s = cls()
        block = edged_block.get("creds") or {}
        if not isinstance(block, dict):
            raise ValueError("edged { creds }: expected a block { }")
        for k, v in block.items():
            lk = k.lower()
            if lk == "watch_interval":
                s.watch_interval = parse_duration(v) if isinstance(v, str) else float(v)
                if s.watch_interval <= 0:
                    raise ValueError("edged { creds { watch_interval } } must be more than 0")
            elif lk == "expiry_warning_days":
                if not isinstance(v, int | float) or isinstance(v, bool) or v < 0:
                    raise ValueError("edged { creds { expiry_warning_days } } must be a number of days >= 0")
                s.expiry_warning_days = float(v)
            else:
                raise ValueError(f"edged {{ creds }}: unknown setting {k!r} (watch_interval, expiry_warning_days)")
        return s


def load(path: str) -> Creds:
    """The creds in a file; CredsError (naming the file) when it cannot be used."""
    jwt, seed = read_creds_file(path)
    try:
        claims = decode(jwt)
    except JWTError as e:
        raise CredsError(f"{path}: the user JWT cannot be read: {e}") from None
    fp = hashlib.sha256(jwt.encode() + b"\n" + seed).hexdigest()[:16]
    return Creds(jwt=jwt, seed=seed, fingerprint=fp, user=str(claims.get("sub") or ""),
                 expires=int(claims.get("exp") or 0))


def _stamp(path: str) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size, st.st_ino


class CredsKeeper:
    """One remote's creds: the ones in use, the last ones the hub accepted, and what happened last."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._stamp: tuple[int, int, int] | None = None
        self.current: Creds | None = None
        self.good: Creds | None = None
        self.trying = False  # `current` came from a change and the hub has not accepted it yet
        self.refused: set[str] = set()
        self.rotations = 0
        self.rollbacks = 0
        self.problem = ""  # the last rotation problem (a refused or unreadable new file), for status

    def credentials(self) -> Creds:
        """The creds for the next CONNECT: read on first use (an unreadable file fails that dial)."""
        if self.current is None:
            self._stamp = _stamp(self.path)
            self.current = load(self.path)
        return self.current

    def poll(self, force: bool = False) -> bool:
        """Look at the file; True when the link should redial with other creds than the ones in use."""
        stamp = _stamp(self.path)
        if not force and stamp == self._stamp:
            return False
        self._stamp = stamp
        if self.current is None:
            return False  # never read yet: the next dial reads it anyway
        try:
            new = load(self.path)
        except CredsError as e:
            self.problem = f"{e}: keeping the credentials in use"
            log.error("Leafnode credentials %s changed but cannot be used: %s", self.path, self.problem)
            return False
        if new.fingerprint == self.current.fingerprint:
            return False
        if new.fingerprint in self.refused:
            return False  # the hub said no to exactly these; wait for another change
        if self.good is not None and new.fingerprint == self.good.fingerprint:
            self.current, self.trying = self.good, False
        else:
            self.current, self.trying = new, True
        self.rotations += 1
        log.info("Leafnode credentials %s changed (user %s): reconnecting with them", self.path, new.user)
        return True

    def accepted(self) -> None:
        """The hub accepted the creds in use."""
        if self.current is None:
            return
        if self.trying:
            log.info("Leafnode credentials %s accepted by the hub (user %s)", self.path, self.current.user)
            self.problem = ""
        self.good, self.trying = self.current, False

    def refused_by_hub(self, reason: str) -> bool:
        """The hub refused the creds in use; True when the link went back to the previous ones."""
        cur = self.current
        if cur is None or not self.trying or self.good is None or self.good.fingerprint == cur.fingerprint:
            return False
        self.refused.add(cur.fingerprint)
        self.current, self.trying = self.good, False
        self.rollbacks += 1
        self.problem = (f"the hub refused the new credentials in {self.path} (user {cur.user}: {reason}); "
                        f"using the previous ones (user {self.good.user})")
        log.error("Leafnode credentials rotation failed: %s", self.problem)
        return True

    def status(self, warning_days: float, now: float | None = None) -> dict[str, Any]:
        """The creds figures of /varz and `edged status`."""
        now = time.time() if now is None else now
        cur = self.current
        exp = cur.expires if cur is not None else 0
        left = exp - now if exp else None
        return {
            "file": self.path,
            "user": cur.user if cur is not None else "",
            "expires": exp,
            "expires_in_seconds": left,
            "expiring": left is not None and left < warning_days * 86400,
            "trying_new": self.trying,
            "rotations": self.rotations,
            "rollbacks": self.rollbacks,
            "problem": self.problem,
        }
