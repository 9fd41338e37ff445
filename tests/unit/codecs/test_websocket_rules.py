"""The WebSocket listener's sans-I/O parts: nats-server's upgrade rules (bridges/websocket/handshake.py) on
given and random requests, and the unmasked reads of a client granted Nats-No-Masking (edged/connections/wslink.py)
through the websockets library's ServerProtocol, whole and cut at random points."""

from __future__ import annotations

import os
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from websockets.datastructures import Headers
from websockets.frames import Frame, Opcode
from websockets.protocol import State
from websockets.server import ServerProtocol

from bridges.websocket.handshake import (
    KIND_CLIENT,
    KIND_LEAF,
    KIND_MQTT,
    OriginError,
    Policy,
    check_origin,
    cookies,
    host_and_port,
    judge,
    kind_of,
    parse_allowed_origins,
)
from edged.connections.wslink import grant_no_masking

KEY = "dGhlIHNhbXBsZSBub25jZQ=="


def headers(**kw: str) -> Headers:
    h = Headers({"Host": "h:80", "Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Key": KEY,
                 "Sec-WebSocket-Version": "13"})
    for k, v in kw.items():
        name = k.replace("_", "-")
        if name in h:
            del h[name]
        if v:
            h[name] = v
    return h


def test_rules_in_nats_server_order() -> None:
    p = Policy()
    assert judge("GET", "/", headers(), p).status == 0
    assert (judge("GET", "/x/mqtt", headers(), p).status, judge("POST", "/x/mqtt", headers(), p).status) == (404, 404)
    assert judge("GET", "/mqtt", headers(), Policy(kinds=frozenset({KIND_CLIENT, KIND_MQTT}))).status == 0
    assert judge("PUT", "/", headers(Host=""), p).status == 405
    assert judge("GET", "/", headers(Host=""), p).reason == "'Host' missing in request"
    assert judge("GET", "/", headers(Upgrade="WebSocket, h2c"), p).status == 0
    assert judge("GET", "/", headers(Connection="close"), p).reason == "invalid value for header 'Connection'"
    assert judge("GET", "/", headers(Sec_WebSocket_Key="!!!"), p).reason == "invalid websocket key"
    assert judge("GET", "/", headers(Sec_WebSocket_Version="8, 13"), p).status == 0


def test_kinds_cookies_and_flags() -> None:
    assert [kind_of(p) for p in ("/", "/a/leafnode", "/mqtt?x=1", "/mqtt/x")] == [KIND_CLIENT, KIND_LEAF, KIND_MQTT,
                                                                                   KIND_CLIENT]
    assert cookies(Headers({"Cookie": 'jwt="e.y.J"; u=a; u=b; bad; =x'})) == {"jwt": "e.y.J", "u": "a"}
    v = judge("GET", "/", headers(Nats_No_Masking="true", Sec_WebSocket_Extensions="x, permessage-deflate; a=1",
                                  User_Agent="Mozilla/5.0"), Policy(compression=True))
    assert (v.no_masking, v.compress, v.browser) == (True, True, True)
    v = judge("GET", "/", headers(Nats_No_Masking="TRUE", Sec_WebSocket_Extensions="permessage-deflate"), Policy())
    assert (v.no_masking, v.compress) == (False, False)


def test_origins() -> None:
    allowed = parse_allowed_origins(["https://A.example", "http://b.example:8080", "http://[::1]:9"])
    assert [(a.scheme, a.host, a.port) for a in allowed] == [("https", "a.example", "443"),
                                                              ("http", "b.example", "8080"), ("http", "::1", "9")]
    ok = ["https://a.example:443", "http://B.example:8080", "http://[::1]:9"]
    for o in ok:
        check_origin(Headers({"Origin": o}), False, allowed, False)
    for o in ["http://a.example", "https://b.example:8080", "null", "a.example"]:
        with pytest.raises(OriginError):
            check_origin(Headers({"Origin": o}), False, allowed, False)
    check_origin(Headers({"Origin": "https://h", "Host": "H:443"}), True, [], True)
    with pytest.raises(OriginError, match="not same origin"):
        check_origin(Headers({"Origin": "http://h", "Host": "h:443"}), True, [], True)
    assert host_and_port(True, "[::1]") == ("::1", "443")
    for bad in ("[::1", "a:b:c", "[::1]x"):
        with pytest.raises(OriginError):
            host_and_port(False, bad)


@settings(max_examples=300, deadline=None)
@given(method=st.sampled_from(["GET", "POST", "get"]), path=st.text(max_size=30),
       hs=st.dictionaries(st.sampled_from(["Host", "Upgrade", "Connection", "Sec-WebSocket-Key", "Origin",
                                           "Sec-WebSocket-Version", "Cookie", "Nats-No-Masking",
                                           "Sec-WebSocket-Extensions", "Sec-WebSocket-Origin"]),
                          st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=40), max_size=10),
       same=st.booleans())
def test_random_requests_get_a_verdict(method: str, path: str, hs: dict[str, str], same: bool) -> None:
    v = judge(method, path, Headers(hs), Policy(same_origin=same, allowed=parse_allowed_origins(["http://x"])))
    assert v.status in (0, 400, 403, 404, 405) and (v.status == 0) == (v.reason == "")


def _frames(payloads: list[bytes], opcode: int = 2) -> bytes:
    out = b""
    for p in payloads:
        n = len(p)
        head = bytes((0x80 | opcode, n)) if n < 126 else (
            struct.pack("!BBH", 0x80 | opcode, 126, n) if n < 65536 else struct.pack("!BBQ", 0x80 | opcode, 127, n))
        out += head + p
    return out


def _upgraded() -> ServerProtocol:
    ws = ServerProtocol(max_size=None)
    ws.receive_data(b"GET / HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                    b"Sec-WebSocket-Key: " + KEY.encode() + b"\r\nSec-WebSocket-Version: 13\r\n\r\n")
    (req,) = ws.events_received()
    ws.send_response(ws.accept(req))
    grant_no_masking(ws)
    assert ws.state is State.OPEN
    return ws


@settings(max_examples=100, deadline=None)
@given(payloads=st.lists(st.binary(max_size=70000), min_size=1, max_size=4), step=st.integers(1, 9000),
       ping=st.binary(max_size=125))
def test_unmasked_frames_read_whole_and_cut(payloads: list[bytes], step: int, ping: bytes) -> None:
    ws = _upgraded()
    data = _frames(payloads[:1]) + _frames([ping], opcode=9) + _frames(payloads[1:])
    events: list[Frame] = []
    for i in range(0, len(data), step):
        ws.receive_data(data[i:i + step])
        events += ws.events_received()
    got = [e.data for e in events if e.opcode is Opcode.BINARY]
    assert got == payloads and [e.data for e in events if e.opcode is Opcode.PING] == [ping]
    assert ws.parser_exc is None


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_after_no_masking_grant(data: bytes) -> None:
    ws = _upgraded()
    ws.receive_data(data)
    ws.events_received()
    ws.data_to_send()  # an error is a close frame to send, never an exception here


def test_masked_frames_still_read_after_the_grant() -> None:
    ws = _upgraded()
    key = os.urandom(4)
    ws.receive_data(bytes((0x82, 0x80 | 3)) + key + bytes(b ^ key[i % 4] for i, b in enumerate(b"abc")))
    assert [e.data for e in ws.events_received()] == [b"abc"]
