"""Logs under systemd: when stderr is the journal stream (JOURNAL_STREAM names its device:inode) every
line starts with its syslog priority, which journald takes as the entry's level, and the timestamp is
left to journald; when JOURNAL_STREAM names another file, lines carry no prefix."""

from __future__ import annotations

import os
import re
import signal

from tests.packaging.notifysock import NotifySocket
from tests.support.servers import ServerProcess


def _lines(journal_match: bool) -> list[str]:
    srv = ServerProcess("edged", ["-js", "-sd", "js"])
    with open(srv.log_path, "ab"):
        pass
    st = os.stat(srv.log_path if journal_match else srv.workdir)
    ns = NotifySocket(srv.workdir)
    srv.env = {"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}", "EDGED_DEBUG_HANG": "1", "NOTIFY_SOCKET": ns.env_value}
    srv.start()
    try:
        ns.wait_for("READY", "1")  # sent once the signal handlers are in place: SIGTERM is a clean stop
        srv.signal(signal.SIGTERM)
        assert srv.proc is not None and srv.proc.wait(30) == 0
    finally:
        srv.stop()
        ns.close()
    return [ln for ln in srv.log_tail(100_000).splitlines() if ln]


def test_journal_lines_carry_their_priority() -> None:
    lines = _lines(True)
    assert all(re.match(r"<[2-7]>\[\d+\] \[(TRC|DBG|INF|WRN|ERR|FTL)\] ", ln) for ln in lines), lines
    assert any(ln.startswith("<6>") and "[INF] Server is ready" in ln for ln in lines), lines
    assert any(ln.startswith("<4>") and "[WRN] EDGED_DEBUG_HANG=1" in ln for ln in lines), lines


def test_other_stream_gets_no_prefix() -> None:
    lines = _lines(False)
    assert lines and not any(ln.startswith("<") for ln in lines), lines
    assert any(re.match(r"\[\d+\] \[INF\] Server is ready", ln) for ln in lines), lines
