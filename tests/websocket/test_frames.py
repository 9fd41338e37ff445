"""Bad WebSocket input, differential where nats-server has an answer: each malformed frame closes that
connection with the close status nats-server gives (1002 protocol error), a close or ping is answered as
nats-server answers it (nats-server's own close frame may lose the race with its socket close), an oversized message is refused with 1009 (edged's limit: max_payload x 8, as
nats-server caps a compressed message), and other connections, WebSocket and TCP, carry on. Random bytes
into the listener, before and after the upgrade, never take the server down."""

from __future__ import annotations

import os
import socket
import struct
import zlib
from collections.abc import Iterator

import nats
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.aio import run
from tests.support.servers import KINDS, ServerProcess
from tests.websocket.wsraw import Frames, deflate, frame, request, upgrade_lines, ws_server


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, tuple[ServerProcess, int]]]:
    started = {k: ws_server(k, "no_tls: true, compression: true") for k in KINDS}
    yield started
    for srv, _ in started.values():
        srv.stop()


def opened(port: int, **headers: str) -> tuple[socket.socket, Frames]:
    rep, sock, rest = request(port, upgrade_lines(port, **headers))
    assert rep.status == 101
    fr = Frames(sock, rest)
    assert fr.data_until(b"\r\n").startswith(b"INFO ")
    sock.sendall(frame(2, b'CONNECT {"verbose":false,"pedantic":false}\r\n'))
    return sock, fr


def alive(srv: ServerProcess, ws_port: int) -> bool:
    """A TCP client and a WebSocket client still exchange a message."""

    async def main() -> bool:
        tcp = await nats.connect(srv.url, allow_reconnect=False)
        ws = await nats.connect(f"ws://127.0.0.1:{ws_port}", allow_reconnect=False)
        try:
            sub = await ws.subscribe("alive")
            await ws.flush()
            for _ in range(3):  # nats-py's WebSocket transport now and then loses the race with its SUB
                await tcp.publish("alive", b"yes")
                try:
                    return (await sub.next_msg(1)).data == b"yes"
                except nats.errors.TimeoutError:
                    pass
            return False
        finally:
            await tcp.close()
            await ws.close()

    return bool(run(main()))


BAD: list[tuple[str, bytes]] = [
    ("unmasked", frame(2, b"PING\r\n", mask=False)),
    ("rsv2", frame(2, b"PING\r\n", rsv=0x20)),
    ("rsv3", frame(2, b"PING\r\n", rsv=0x10)),
    ("unknown opcode", frame(3, b"x")),
    ("control too long", frame(9, b"p" * 126)),
    ("control fragmented", frame(9, b"p", fin=False)),
    ("continuation first", frame(0, b"PING\r\n")),
    ("new message inside a fragmented one", frame(2, b"PI", fin=False) + frame(2, b"NG\r\n")),
    ("compressed control", frame(9, b"p", rsv=0x40)),
    ("close with one byte", frame(8, b"\x03")),
    ("close with a reserved status", frame(8, struct.pack("!H", 1005))),
]


@pytest.mark.parametrize(("name", "data"), BAD, ids=[b[0] for b in BAD])
def test_malformed_frame_closes_with_protocol_error(servers: dict[str, tuple[ServerProcess, int]], name: str,
                                                    data: bytes) -> None:
    got = {}
    for kind, (_, port) in servers.items():
        sock, fr = opened(port)
        try:
            sock.sendall(data)
            got[kind] = fr.close_status()
        finally:
            sock.close()
    # nats-server queues the 1002 close frame and closes the socket: the frame is not always out first
    assert got["edged"] == 1002 and got["nats-server"] in (1002, None), got
    for srv, port in servers.values():
        assert alive(srv, port)


def test_close_ping_and_fragments_answered_alike(servers: dict[str, tuple[ServerProcess, int]]) -> None:
    for kind, (_, port) in servers.items():
        sock, fr = opened(port)
        try:
            # a PING split over three frames of one message, then a WebSocket ping, then a close
            sock.sendall(frame(2, b"SUB x 1\r\nPI", fin=False) + frame(0, b"N", fin=False) + frame(0, b"G\r\n"))
            assert fr.data_until(b"PONG\r\n").endswith(b"PONG\r\n"), kind
            sock.sendall(frame(9, b"are you there"))
            f = fr.next()
            while f is not None and f[0] in (1, 2):
                f = fr.next()
            assert f is not None and (f[0], f[2]) == (10, b"are you there"), kind
            sock.sendall(frame(8, struct.pack("!H", 1000) + b"bye"))
            assert fr.close_status() == 1000, kind
        finally:
            sock.close()


def test_compressed_input_and_output(servers: dict[str, tuple[ServerProcess, int]]) -> None:
    """A deflated message from the client is read; a large delivery comes back deflated (rsv1)."""
    for kind, (_, port) in servers.items():
        sock, fr = opened(port, Sec_WebSocket_Extensions="permessage-deflate")
        try:
            payload = b"z" * 2000
            msg = b"SUB big 1\r\nPUB big %d\r\n%s\r\nPING\r\n" % (len(payload), payload)
            sock.sendall(frame(2, deflate(msg), rsv=0x40))
            out, compressed = b"", False
            for _ in range(50):
                f = fr.next()
                assert f is not None, kind
                out += f[2]
                compressed |= f[1] and len(f[2]) > 1000
                if b"PONG\r\n" in out:
                    break
            assert b"MSG big 1 2000\r\n" + payload in out and compressed, kind
        finally:
            sock.close()


def test_oversized_message_refused_with_1009(servers: dict[str, tuple[ServerProcess, int]]) -> None:
    srv, port = servers["edged"]
    sock, fr = opened(port)
    try:
        sock.sendall(frame(2, b"", length=1 << 40)[:14])  # the header alone claims a terabyte
        assert fr.close_status() == 1009
    finally:
        sock.close()
    assert alive(srv, port)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(before=st.binary(max_size=300), after=st.binary(max_size=300))
def test_random_bytes_never_take_the_listener_down(servers: dict[str, tuple[ServerProcess, int]], before: bytes,
                                                   after: bytes) -> None:
    srv, port = servers["edged"]
    with socket.create_connection(("127.0.0.1", port), timeout=2) as s:  # garbage instead of a request
        s.sendall(before + b"\r\n\r\n")
        try:
            s.recv(4096)
        except OSError:
            pass
    rep, sock, _ = request(port, upgrade_lines(port))  # garbage after a good upgrade
    try:
        assert rep.status == 101
        sock.sendall(after)
        sock.settimeout(0.2)
        try:
            sock.recv(4096)
        except OSError:
            pass
    finally:
        sock.close()
    assert srv.proc is not None and srv.proc.poll() is None


def test_listener_still_serves_after_the_random_input(servers: dict[str, tuple[ServerProcess, int]]) -> None:
    srv, port = servers["edged"]
    assert alive(srv, port)


async def _publish_many(url: str) -> None:
    nc = await nats.connect(url, allow_reconnect=False)
    for i in range(200):
        await nc.publish("many", b"%03d" % i)
    await nc.close()


def test_deliveries_are_batched_into_frames(servers: dict[str, tuple[ServerProcess, int]]) -> None:
    """200 messages published in one flush reach a WebSocket subscriber in far fewer frames (a frame per
    flush of the connection, not per message), on both servers."""
    for kind, (srv, port) in servers.items():
        sock, fr = opened(port)
        try:
            sock.sendall(frame(2, b"SUB many 1\r\nPING\r\n"))
            assert fr.data_until(b"PONG\r\n").endswith(b"PONG\r\n")

            run(_publish_many(srv.url))
            data, frames = b"", 0
            while data.count(b"MSG many 1 3\r\n") < 200 and frames < 400:
                f = fr.next()
                assert f is not None, kind
                if f[0] in (1, 2):
                    data, frames = data + f[2], frames + 1
            assert data.count(b"MSG many 1 3\r\n") == 200 and frames < 50, (kind, frames)
        finally:
            sock.close()


def test_handshake_timeout_closes_an_idle_socket() -> None:
    for kind in KINDS:
        srv, port = ws_server(kind, 'no_tls: true, handshake_timeout: "300ms"')
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
                s.sendall(b"GET / HTTP/1.1\r\n")  # and nothing more
                try:
                    rest = s.recv(4096)
                except ConnectionResetError:
                    rest = b""
                # nats-server's HTTP server may answer 408 first; either way the socket ends
                assert rest == b"" or rest.startswith(b"HTTP/1.1 4"), (kind, rest)
        finally:
            srv.stop()


@pytest.mark.parametrize("compression", [False, True], ids=["plain", "deflate"])
def test_browsers_get_frames_of_at_most_4k(compression: bool) -> None:
    """A client whose User-Agent is a browser's gets a large delivery in frames of at most 4096 bytes:
    whole messages uncompressed, the fragments of one message compressed; the same on both servers."""
    payload = os.urandom(20000)  # incompressible: the compressed message is larger than a frame too
    got = {}
    for kind in KINDS:
        srv, port = ws_server(kind, f"no_tls: true, compression: {str(compression).lower()}")
        try:
            ext = {"Sec_WebSocket_Extensions": "permessage-deflate"} if compression else {}
            sock, fr = opened(port, User_Agent="Mozilla/5.0 (X11; Linux x86_64) Firefox/140.0", **ext)
            sock.sendall(frame(2, b"SUB big 1\r\nPING\r\n"))
            assert fr.data_until(b"PONG\r\n").endswith(b"PONG\r\n")
            run(_publish(srv.url, "big", payload))
            frames: list[tuple[int, bool, int]] = []
            data, message = b"", b""
            while payload not in data and len(frames) < 100:
                f = fr.next(raw=True)
                assert f is not None, kind
                op, rsv1, body = f
                frames.append((op, rsv1, len(body)))
                message += body
                if not compression:
                    data += body
                elif body:
                    try:
                        data = zlib.decompressobj(-15).decompress(message + b"\x00\x00\xff\xff")
                    except zlib.error:
                        pass
            sock.close()
            assert payload in data, kind
            assert max(n for _, _, n in frames) <= 4096 and len(frames) >= 5, (kind, frames)
            if compression:
                assert frames[0][:2] == (2, True) and all(f[:2] == (0, False) for f in frames[1:]), (kind, frames)
            got[kind] = sorted({op for op, _, _ in frames})  # how a server cuts its buffers is its own
        finally:
            srv.stop()
    assert got["edged"] == got["nats-server"]


async def _publish(url: str, subject: str, payload: bytes) -> None:
    nc = await nats.connect(url, allow_reconnect=False)
    await nc.publish(subject, payload)
    await nc.close()
