"""Process signals as nats-server handles them: SIGTERM, SIGUSR2 (lame duck), SIGHUP (reload)."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import time

import nats
import pytest

from tests.support.aio import run


def test_sigterm_graceful_exit_zero(start_server):
    p = start_server("edged")
    p.signal(signal.SIGTERM)
    assert p.proc.wait(10) == 0
    assert "Server Exiting" in p.log_tail()


@pytest.mark.parametrize("kind", ["nats-server", "edged"])
def test_lame_duck_mode(kind, start_server):
    conf = 'lame_duck_duration: "30s"\nlame_duck_grace_period: "1s"\n'
    p = start_server(kind, config=conf)

    async def main():
        ldm = asyncio.Event()

        async def on_ldm():
            ldm.set()

        nc = await nats.connect(p.url, lame_duck_mode_cb=on_ldm, allow_reconnect=False)
        assert nc.is_connected
        t0 = time.monotonic()
        p.signal(signal.SIGUSR2)
        await asyncio.wait_for(ldm.wait(), 5)
        # new connections are refused while in lame duck mode
        await asyncio.sleep(0.3)
        try:
            socket.create_connection(("127.0.0.1", p.port), timeout=1).close()
            refused = False
        except OSError:
            refused = True
        await asyncio.to_thread(p.proc.wait, 15)
        return refused, time.monotonic() - t0

    refused, took = run(main())
    assert refused
    assert took < 10


def test_sighup_reloads_auth_without_dropping_clients(tmp_path, start_server):
    conf = "authorization { users: [ {user: a, password: one}, {user: keep, password: k} ] }\n"
    p = start_server("edged", config=conf)

    async def main():
        keep = await nats.connect(f"nats://keep:k@127.0.0.1:{p.port}", allow_reconnect=False)
        path = os.path.join(p.workdir, "server.conf")
        with open(path, "w") as f:
            f.write("authorization { users: [ {user: a, password: two}, {user: keep, password: k} ] }\n")
        p.signal(signal.SIGHUP)
        await asyncio.sleep(0.5)
        ok = await nats.connect(f"nats://a:two@127.0.0.1:{p.port}", allow_reconnect=False)
        await ok.close()
        try:
            bad = await nats.connect(f"nats://a:one@127.0.0.1:{p.port}", allow_reconnect=False,
                                     max_reconnect_attempts=0)
            await bad.close()
            old_rejected = False
        except Exception:
            old_rejected = True
        # the untouched client is still connected and working
        sub = await keep.subscribe("still.here")
        await keep.publish("still.here", b"1")
        msg = await sub.next_msg(timeout=2)
        await keep.close()
        return old_rejected, msg.data

    old_rejected, data = run(main())
    assert old_rejected and data == b"1"
    assert "Reloaded server configuration" in p.log_tail()

