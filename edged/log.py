"""Logging in nats-server's style: one line per event, `[pid] date time [LVL] text`.

Under systemd (JOURNAL_STREAM set) the timestamp is left to journald, and a line written to the journal
stream starts with its syslog priority (`<4>` for a warning), which journald takes as the entry's level.
"""

from __future__ import annotations

import logging
import os
import sys
import time

_LEVELS = {
    logging.DEBUG: "DBG",
    logging.INFO: "INF",
    logging.WARNING: "WRN",
    logging.ERROR: "ERR",
    logging.CRITICAL: "FTL",
}
TRACE = 5
logging.addLevelName(TRACE, "TRC")
_LEVELS[TRACE] = "TRC"


# syslog priorities for journald's `<N>` line prefix (sd-daemon.h: SD_ERR ... SD_DEBUG)
_PRIORITIES = {"TRC": 7, "DBG": 7, "INF": 6, "WRN": 4, "ERR": 3, "FTL": 2}


class _Formatter(logging.Formatter):
    def __init__(self, logtime: bool, journal: bool = False) -> None:
        super().__init__()
        self.logtime = logtime
        self.journal = journal
        self.pid = os.getpid()

    def format(self, record: logging.LogRecord) -> str:
        lvl = _LEVELS.get(record.levelno, "INF")
        msg = record.getMessage()
        # journald reads the priority from a `<N>` prefix, so `journalctl -p warning` finds edged's warnings
        pri = f"<{_PRIORITIES[lvl]}>" if self.journal else ""
        if self.logtime:
            t = record.created
            ts = time.strftime("%Y/%m/%d %H:%M:%S", time.localtime(t)) + f".{int((t % 1) * 1e6):06d}"
            return f"{pri}[{self.pid}] {ts} [{lvl}] {msg}"
        return f"{pri}[{self.pid}] [{lvl}] {msg}"


def stderr_is_journal() -> bool:
    """Is stderr the journal stream systemd connected (JOURNAL_STREAM is its `device:inode`)?"""
    dev, _, ino = os.environ.get("JOURNAL_STREAM", "").partition(":")
    if not (dev.isdigit() and ino.isdigit()):
        return False
    try:
        st = os.fstat(sys.stderr.fileno())
    except (OSError, ValueError):
        return False
    return st.st_dev == int(dev) and st.st_ino == int(ino)


def setup(debug: bool = False, trace: bool = False, logtime: bool = True, log_file: str = "") -> logging.Logger:
    logger = logging.getLogger("edged")
    for h in list(logger.handlers):
        logger.removeHandler(h)
    handler: logging.Handler
    journal = False
    if log_file:
        handler = logging.FileHandler(log_file)
    else:
        handler = logging.StreamHandler(sys.stderr)
        if os.environ.get("JOURNAL_STREAM"):
            logtime = False
            journal = stderr_is_journal()
    handler.setFormatter(_Formatter(logtime, journal))
    logger.addHandler(handler)
    logger.setLevel(TRACE if trace else logging.DEBUG if debug else logging.INFO)
    logger.propagate = False
    return logger


log = logging.getLogger("edged")
