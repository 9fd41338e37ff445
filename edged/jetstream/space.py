"""Space accounting: the server-wide limits, usage and reservations summed over accounts, and the disk
reserve kept for a full disk.

Server-wide limits default as in nats-server (75% of memory, 75% of the disk free at start). A small
reserve file in the store directory is released when the disk fills up, so that purges and deletes
can still be written (see note_store_full).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from typing import TYPE_CHECKING

from edged.log import log

if TYPE_CHECKING:
    from edged.jetstream.account import JSAccount

RESERVE_NAME = "space.reserve"
RESERVE_MAX = 8 * 1024 * 1024


class Space:
    """The server's JetStream storage: its limits, what the accounts use and reserve, a full disk."""

    def __init__(self, store_dir: str, max_memory: int, max_file: int, accounts: dict[str, JSAccount]) -> None:
        self.store_dir = store_dir
        self.max_memory = max_memory
        self.max_file = max_file
        self.accounts = accounts
        self._usage = [0, 0]  # upper bounds of the server's memory and file usage (see server_usage)
        self._usage_recheck = [-1, -1]  # past these bounds the exact totals are taken again
        # disk full: see note_store_full
        self.store_full = False
        self._full_usage = 0
        self._reserve_path = os.path.join(store_dir, RESERVE_NAME)
        self._reserve_size = 0

    def start(self) -> None:
        """Unset server limits default as nats-server's do: 75% of the memory, 75% of the disk free now;
        then the reserve is made."""
        if self.max_memory < 0:
            with contextlib.suppress(ValueError, OSError):
                self.max_memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 4 * 3
        if self.max_file < 0:
            with contextlib.suppress(OSError):
                st = os.statvfs(self.store_dir)
                self.max_file = st.f_bavail * st.f_frsize // 4 * 3
        self._make_reserve()

    def tick(self) -> None:
        """Each upkeep tick: while the disk is full or the reserve is missing, look again."""
        if self.store_full or not self._reserve_size:
            self._check_space()

    def total_reserved(self) -> tuple[int, int]:
        return _sum_pairs(jsa.reserved() for jsa in self.accounts.values())

    def server_usage(self, memory: bool, adding: int) -> int:
        """The server's memory or file usage before a message of `adding` bytes, for the server-wide limit
        checked on every publish. Summing all streams each time would cost per message; instead the last
        exact total plus everything added since (removals not counted) is an upper bound, and the exact
        total is taken again once that bound has used up half the room the last total left, so always
        before the bound can pass the limit."""
        i = 0 if memory else 1
        u = self._usage
        used = u[i]
        if used > self._usage_recheck[i]:
            u[0], u[1] = self.total_usage()
            used = u[i]
            for j, limit in ((0, self.max_memory), (1, self.max_file)):
                self._usage_recheck[j] = u[j] + (limit - u[j]) // 2 if limit > u[j] else u[j]
        u[i] = used + adding
        return used

    def total_usage(self) -> tuple[int, int]:
        return _sum_pairs(jsa.usage() for jsa in self.accounts.values())

    # ------------------------------------------------------------------ disk full

    def _make_reserve(self) -> None:
        """Keep a few MB of the store's filesystem in a reserve file. When the disk fills up, SQLite can
        neither checkpoint its WAL (the database file must grow) nor write the WAL of a purge, so
        nothing could ever be removed; releasing the reserve gives exactly that room back."""
        try:
            st = os.statvfs(self.store_dir)
            size = _reserve_for(st)
            if size <= 0:
                return
            if os.path.exists(self._reserve_path) and os.path.getsize(self._reserve_path) >= size:
                self._reserve_size = size
                return
            fd = os.open(self._reserve_path, os.O_WRONLY | os.O_CREAT, 0o600)
            try:
                os.posix_fallocate(fd, 0, size)
            finally:
                os.close(fd)
            self._reserve_size = size
        except OSError as e:
            self._reserve_size = 0
            with contextlib.suppress(OSError):
                os.unlink(self._reserve_path)
            log.warning("JetStream: could not reserve space in %s: %s", self.store_dir, e)

    def note_store_full(self) -> None:
        """The store hit a full disk: release the reserve so that purges and deletes can be written, and
        refuse publishes to file streams until enough has been removed or the disk has room again
        (_check_space)."""
        if self.store_full:
            return
        self.store_full = True
        self._full_usage = self.total_usage()[1]
        released = self._reserve_size
        with contextlib.suppress(OSError):
            os.unlink(self._reserve_path)
        self._reserve_size = 0
        log.error("JetStream: the store's disk is full (%s); released %d reserved bytes so purges and deletes "
                  "can proceed; publishes to file streams are refused until messages are removed or the disk "
                  "has room again",
                  self.store_dir, released)

    def space_freed(self) -> None:
        """Called after a purge or delete committed: maybe publishes can resume right away."""
        if self.store_full:
            self._check_space()

    def _check_space(self) -> None:
        """While the disk is full (and each tick until the reserve is back): resume publishes once
        messages were removed, or once the disk has room again for another reason (something else's
        files deleted, the filesystem grown); make the reserve again when there is room for it."""
        try:
            st: os.statvfs_result | None = os.statvfs(self.store_dir)
        except OSError:
            st = None
        if self.store_full:
            need = max(1, min(RESERVE_MAX // 2, self._full_usage // 2))
            if self.total_usage()[1] <= self._full_usage - need:
                # enough removed: the database reuses those pages without growing
                self.store_full = False
                log.info("JetStream: messages were removed; publishes to file streams are accepted again")
            elif st is not None and _free_reserves(st) >= 4:
                # room for the reserve and three times as much besides, so that a publisher does not
                # bounce straight back onto a full disk
                self.store_full = False
                log.info("JetStream: the store's disk has room again; publishes to file streams are accepted "
                         "again")
        if not self._reserve_size and st is not None and _free_reserves(st) > 2:
            self._make_reserve()


def _reserve_for(st: os.statvfs_result) -> int:
    """The reserve kept on a filesystem: 5% of it, at most RESERVE_MAX, in whole pages."""
    size = min(RESERVE_MAX, st.f_blocks * st.f_frsize // 20)
    return size - size % 4096


def _free_reserves(st: os.statvfs_result) -> float:
    """The filesystem's free space in reserves (at least 1 MB each)."""
    return st.f_bavail * st.f_frsize / max(_reserve_for(st), 1 << 20)


def _sum_pairs(pairs: Iterable[tuple[int, int]]) -> tuple[int, int]:
    """(memory, file) totals over accounts."""
    mem = file = 0
    for m, f in pairs:
        mem += m
        file += f
    return mem, file
