"""A wildcard host listens on IPv4 and IPv6, differential: nats-server's listeners are Go's
net.Listen("tcp", "0.0.0.0:port"), one dual-stack socket, so `nats://[::1]:4222` reaches a server started
with the default host, and so do the monitoring, MQTT, WebSocket and leafnode ports. An IPv4 client of such a
socket is still reported as 127.0.0.1 (INFO client_ip), an IPv6 one as ::1; a host that is an IPv4 address
listens on IPv4 only, and the monitoring port without a host of its own listens on the client port's host
(nats-server's setBaselineOptions)."""

from __future__ import annotations

import json
import socket
import tempfile
from typing import Any

import nats
import pytest

from tests.support.aio import run
from tests.support.servers import KINDS, ServerProcess, free_port


def _has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


pytestmark = pytest.mark.skipif(not _has_ipv6_loopback(), reason="no IPv6 loopback (::1) on this machine")


def _recv_some(host: str, port: int, send: bytes = b"", want: int = 1) -> bytes:
    """Connect, send, and read until `want` bytes came (or the peer closed); b"refused" when nobody listens."""
    try:
        s = socket.create_connection((host, port), timeout=5)
    except ConnectionRefusedError:
        return b"refused"
    with s:
        if send:
            s.sendall(send)
        got = b""
        while len(got) < want:
            chunk = s.recv(4096)
            if not chunk:
                break
            got += chunk
        return got


def _info_client_ip(host: str, port: int) -> str:
    line = _recv_some(host, port, want=8).split(b"\r\n", 1)[0]
    assert line.startswith(b"INFO "), line
    return str(json.loads(line[5:])["client_ip"])


def _http_status(host: str, port: int) -> str:
    head = _recv_some(host, port, b"GET /varz HTTP/1.0\r\nHost: x\r\n\r\n", want=12)
    return head.split(b"\r\n", 1)[0].decode().split(" ", 1)[1]  # the status (Go answers 1.0 with 1.0)


MQTT_CONNECT = bytes([0x10, 14, 0, 4]) + b"MQTT" + bytes([4, 2, 0, 30, 0, 2]) + b"c6"
WS_UPGRADE = (b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
              b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")


async def _roundtrip(url: str) -> bytes:
    nc = await nats.connect(url, allow_reconnect=False, connect_timeout=5)
    sub = await nc.subscribe("six")
    await nc.publish("six", b"over v6")
    msg = await sub.next_msg(timeout=5)
    await nc.close()
    return msg.data


def _scenario(kind: str) -> dict[str, Any]:
    ports = {k: free_port() for k in ("http", "mqtt", "ws", "leaf")}
    conf = (f'server_name: v6{kind.replace("-", "")}\njetstream {{ store_dir: "{tempfile.mkdtemp(prefix="v6-")}" }}\n'
            f'http_port: {ports["http"]}\nmqtt {{ port: {ports["mqtt"]} }}\n'
            f'websocket {{ port: {ports["ws"]}, no_tls: true }}\nleafnodes {{ port: {ports["leaf"]} }}\n')
    p = ServerProcess(kind, ["-a", "0.0.0.0"], config=conf).start()
    try:
        out: dict[str, Any] = {
            "nats [::1]": run(_roundtrip(f"nats://[::1]:{p.port}"), timeout=30),
            "client_ip over ::1": _info_client_ip("::1", p.port),
            "client_ip over 127.0.0.1": _info_client_ip("127.0.0.1", p.port),
            "monitoring [::1]": _http_status("::1", ports["http"]),
            "monitoring 127.0.0.1": _http_status("127.0.0.1", ports["http"]),
            "mqtt [::1]": _recv_some("::1", ports["mqtt"], MQTT_CONNECT, want=4)[:4],
            "websocket [::1]": _recv_some("::1", ports["ws"], WS_UPGRADE, want=12).split(b"\r\n", 1)[0],
            "leafnode [::1]": _recv_some("::1", ports["leaf"], want=5)[:5],
        }
    finally:
        p.stop()
    # an IPv4 address as the host: IPv4 only, and the monitoring port (no host of its own) takes that host too
    http = free_port()
    p = ServerProcess(kind, ["-a", "127.0.0.1"], http_port=http).start()
    try:
        out["nats [::1], host 127.0.0.1"] = _recv_some("::1", p.port, want=5)
        out["monitoring [::1], host 127.0.0.1"] = _recv_some("::1", http, want=5)
        out["monitoring 127.0.0.1, host 127.0.0.1"] = _http_status("127.0.0.1", http)
    finally:
        p.stop()
    return out


def test_wildcard_host_listens_on_ipv4_and_ipv6() -> None:
    res = {kind: _scenario(kind) for kind in KINDS}
    assert res["edged"] == res["nats-server"]
    got = res["edged"]
    assert got["nats [::1]"] == b"over v6"
    assert got["client_ip over ::1"] == "::1"
    assert got["client_ip over 127.0.0.1"] == "127.0.0.1"
    assert got["monitoring [::1]"] == "200 OK"
    assert got["mqtt [::1]"] == b"\x20\x02\x00\x00"
    assert got["websocket [::1]"] == b"HTTP/1.1 101 Switching Protocols"
    assert got["leafnode [::1]"] == b"INFO "
    assert got["nats [::1], host 127.0.0.1"] == b"refused"
    assert got["monitoring [::1], host 127.0.0.1"] == b"refused"
    assert got["monitoring 127.0.0.1, host 127.0.0.1"] == "200 OK"


def test_dual_stack_socket_falls_back_where_asked_for_an_address() -> None:
    """Only wildcard hosts get the dual-stack socket; an address is listened on as given."""
    from edged.connections.listener import dual_stack_socket, peer_address

    assert dual_stack_socket("127.0.0.1", 0) is None
    assert dual_stack_socket("::1", 0) is None
    s = dual_stack_socket("0.0.0.0", 0)
    assert s is not None
    try:
        assert s.family == socket.AF_INET6
        assert s.getsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY) == 0
        port = s.getsockname()[1]
        # the port is taken: a second wildcard listener fails as a second IPv4 one would
        with pytest.raises(OSError):
            dual_stack_socket("", port)
    finally:
        s.close()
    assert peer_address(("::ffff:10.1.2.3", 5, 0, 0)) == ("10.1.2.3", 5)
    assert peer_address(("::1", 6, 0, 0)) == ("::1", 6)
    assert peer_address(("::ffff:abcd", 7, 0, 0)) == ("::ffff:abcd", 7)
