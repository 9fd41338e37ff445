"""Logging in nats-server's style: one line per event, `[pid] date time [LVL] text`.

Under systemd (JOURNAL_STREAM set) the timestamp is left to journald.
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


class _Formatter(logging.Formatter):
    def __init__(self, logtime: bool) -> None:
        super().__init__()
        self.logtime = logtime
        self.pid = os.getpid()

    def format(self, record: logging.LogRecord) -> str:
        lvl = _LEVELS.get(record.levelno, "INF")
        msg = record.getMessage()
        if self.logtime:
            t = record.created
            ts = time.strftime("%Y/%m/%d %H:%M:%S", time.localtime(t)) + f".{int((t % 1) * 1e6):06d}"
            return f"[{self.pid}] {ts} [{lvl}] {msg}"
        return f"[{self.pid}] [{lvl}] {msg}"


def setup(debug: bool = False, trace: bool = False, logtime: bool = True, log_file: str = "") -> logging.Logger:
    logger = logging.getLogger("edged")
    for h in list(logger.handlers):
        logger.removeHandler(h)
    handler: logging.Handler
    if log_file:
        handler = logging.FileHandler(log_file)
    else:
        handler = logging.StreamHandler(sys.stderr)
        if os.environ.get("JOURNAL_STREAM"):
            logtime = False
    handler.setFormatter(_Formatter(logtime))
    logger.addHandler(handler)
    logger.setLevel(TRACE if trace else logging.DEBUG if debug else logging.INFO)
    logger.propagate = False
    return logger


log = logging.getLogger("edged")
