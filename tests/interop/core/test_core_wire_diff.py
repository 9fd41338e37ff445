"""Differential wire tests: the same raw protocol bytes to nats-server and to edged, same bytes back.

Raw sockets, so every -ERR text, +OK, MSG/HMSG framing and close behaviour is compared exactly.
"""

from __future__ import annotations

import json
import re
import socket
import time

import pytest

from tests.support.servers import ServerProcess


@pytest.fixture(scope="module")
def servers():
    procs = {k: ServerProcess(k).start() for k in ("nats-server", "edged")}
    yield procs
    for p in procs.values():
        p.stop()


def converse(port: int, data: bytes, wait: float = 0.4) -> tuple[bytes, bool]:
    """Send `data`, read until the server closes or goes quiet; return (bytes after INFO, closed)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=2)
    f = b""
    while b"\r\n" not in f:
        f += s.recv(4096)
    info, rest = f.split(b"\r\n", 1)
    assert info.startswith(b"INFO ")
    s.sendall(data)
    s.settimeout(wait)
    out = rest
    closed = False
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        try:
            chunk = s.recv(65536)
        except TimeoutError:
            break
        except ConnectionResetError:
            closed = True
            break
        if not chunk:
            closed = True
            break
        out += chunk
    s.close()
    return out, closed


CASES = {
    "unknown_op": b"FOO bar\r\n",
    "unknown_op_after_connect": b"CONNECT {}\r\nPING\r\nXYZ\r\n",
    "max_payload": b"CONNECT {}\r\nPUB foo 2000000\r\n",
    "payload_too_long": b"CONNECT {}\r\nPUB foo 3\r\nabcdef\r\n",
    "pub_bad_size": b"CONNECT {}\r\nPUB foo x\r\n",
    "pub_too_many_args": b"CONNECT {}\r\nPUB a b c 1\r\nx\r\n",
    "sub_missing_sid": b"CONNECT {}\r\nSUB foo\r\n",
    "invalid_subject": b"CONNECT {}\r\nSUB foo..bar 1\r\nSUB foo.>.x 2\r\nPING\r\n",
    "verbose": b'CONNECT {"verbose":true}\r\nSUB foo 1\r\nPUB foo 2\r\nhi\r\nUNSUB 1\r\nPING\r\n',
    "pedantic_pub": b'CONNECT {"pedantic":true}\r\nSUB foo.* 1\r\nPUB foo.* 0\r\n\r\nPING\r\n',
    "hpub_without_headers": b"CONNECT {}\r\nHPUB foo 12 12\r\nNATS/1.0\r\n\r\n\r\n",
    "hpub_roundtrip": b'CONNECT {"headers":true}\r\nSUB foo 1\r\nHPUB foo bar 22 24\r\nNATS/1.0\r\nA: b\r\n\r\n\r\nhi\r\nPING\r\n',
    "headers_stripped_for_old_client": b'CONNECT {}\r\nSUB foo 1\r\nPING\r\n',
    "no_responders_needs_headers": b'CONNECT {"no_responders":true}\r\n',
    "no_responders": b'CONNECT {"headers":true,"no_responders":true}\r\nSUB _INBOX.x 7\r\nPUB nobody _INBOX.x 0\r\n\r\nPING\r\n',
    "unsub_max": b"CONNECT {}\r\nSUB foo 1\r\nUNSUB 1 2\r\nPUB foo 1\r\na\r\nPUB foo 1\r\nb\r\nPUB foo 1\r\nc\r\nPING\r\n",
    "unsub_unknown_sid": b"CONNECT {}\r\nUNSUB 99\r\nPING\r\n",
    "echo_off": b'CONNECT {"echo":false}\r\nSUB foo 1\r\nPUB foo 1\r\nx\r\nPING\r\n',
    "wildcards": b"CONNECT {}\r\nSUB a.* 1\r\nSUB a.> 2\r\nSUB > 3\r\nPUB a.b.c 0\r\n\r\nPUB a.b 0\r\n\r\nPING\r\n",
    "reply_subject": b"CONNECT {}\r\nSUB svc 1\r\nPUB svc me.reply 3\r\nabc\r\nPING\r\n",
    "duplicate_sid": b"CONNECT {}\r\nSUB foo 1\r\nSUB bar 1\r\nPUB bar 0\r\n\r\nPUB foo 0\r\n\r\nPING\r\n",
    "lowercase_ops": b"connect {}\r\nsub foo 1\r\npub foo 1\r\nz\r\nping\r\n",
    "connect_bad_json": b"CONNECT {nope\r\n",
    "client_sends_err": b"CONNECT {}\r\n-ERR 'boom'\r\n",
    "control_line_too_long": b"CONNECT {}\r\nSUB " + b"a" * 5000 + b" 1\r\n",
    "empty_lines": b"CONNECT {}\r\n\r\nPING\r\n",
    # runs of PUBs with one subject (edged routes them as a whole when that changes nothing on the wire)
    "run_mixed_sizes": b'CONNECT {"verbose":false}\r\nSUB foo 1\r\nPUB foo 1\r\na\r\nPUB foo 2\r\nbb\r\n'
                       b"PUB foo 2\r\ncc\r\nPUB foo 1\r\nd\r\nPUB foo 0\r\n\r\nPING\r\n",
    "run_reply": b'CONNECT {"verbose":false}\r\nSUB svc 1\r\n' + b"PUB svc r.1 2\r\nab\r\n" * 3
                 + b"PUB svc r.2 2\r\nab\r\nPING\r\n",
    "run_bad_crlf_mid_run": b'CONNECT {"verbose":false}\r\nSUB foo 1\r\n' + b"PUB foo 1\r\na\r\n" * 3
                            + b"PUB foo 1\r\nbc\r\n",
    "run_verbose": b'CONNECT {"verbose":true}\r\nSUB foo 1\r\n' + b"PUB foo 2\r\nhi\r\n" * 3 + b"PING\r\n",
    "run_pedantic": b'CONNECT {"verbose":false,"pedantic":true}\r\nSUB foo.* 1\r\n' + b"PUB foo.* 1\r\nx\r\n" * 3
                    + b"PING\r\n",
    "run_echo_off": b'CONNECT {"verbose":false,"echo":false}\r\nSUB foo 1\r\n' + b"PUB foo 1\r\nx\r\n" * 3
                    + b"PING\r\n",
    "run_unsub_max": b'CONNECT {"verbose":false}\r\nSUB foo 1\r\nUNSUB 1 2\r\n' + b"PUB foo 1\r\nx\r\n" * 4
                     + b"PING\r\n",
    "run_no_responders": b'CONNECT {"verbose":false,"headers":true,"no_responders":true}\r\nSUB _INBOX.x 7\r\n'
                         + b"PUB nobody _INBOX.x 0\r\n\r\n" * 3 + b"PING\r\n",
    "run_interrupted_by_sub": b'CONNECT {"verbose":false}\r\nSUB foo 1\r\nPUB foo 1\r\na\r\nPUB foo 1\r\nb\r\n'
                              b"SUB foo 2\r\nPUB foo 1\r\nc\r\nUNSUB 1\r\nPUB foo 1\r\nd\r\nPING\r\n",
}


def normalize(out: bytes) -> bytes:
    # INFO lines (none expected after the first) and PINGs from the server are timing-dependent
    return re.sub(rb"PING\r\n", b"", out)


@pytest.mark.parametrize("name", sorted(CASES))
def test_same_wire_behaviour(servers, name):
    data = CASES[name]
    got = {k: converse(p.port, data) for k, p in servers.items()}
    ref, ours = got["nats-server"], got["edged"]
    assert normalize(ours[0]) == normalize(ref[0]), f"{name}: nats-server={ref[0]!r} edged={ours[0]!r}"
    assert ours[1] == ref[1], f"{name}: closed nats-server={ref[1]} edged={ours[1]}"


def _deliveries(out: bytes) -> list[tuple[bytes, list[bytes]]]:
    """(payload, sids) per published message: MSG lines in a row with one payload are one message's
    deliveries, whose order among one connection's subscriptions nats-server does not fix."""
    groups: list[tuple[bytes, list[bytes]]] = []
    for sid, payload in re.findall(rb"MSG \S+ (\S+) \d+\r\n(\w*)\r\n", out):
        if groups and groups[-1][0] == payload:
            groups[-1][1].append(sid)
        else:
            groups.append((payload, [sid]))
    return [(p, sorted(sids)) for p, sids in groups]


@pytest.mark.parametrize("subs", [b"SUB foo 1\r\nSUB f* 2\r\nSUB foo 3\r\n",
                                  b"SUB foo 1\r\nSUB foo 2\r\nUNSUB 2 2\r\n"])
def test_run_to_several_subscriptions_of_one_connection(servers, subs):
    """A run of PUBs reaching several subscriptions of one connection: each message goes to all of them
    before the next message (and a limit still cuts one of them off in the middle of the run)."""
    data = b'CONNECT {"verbose":false}\r\n' + subs + b"".join(b"PUB foo 1\r\n%s\r\n" % c for c in b"a b c d e".split())
    got = {k: _deliveries(converse(p.port, data + b"PING\r\n")[0]) for k, p in servers.items()}
    assert got["edged"] == got["nats-server"]
    assert [g[0] for g in got["edged"]] == b"a b c d e".split()


def test_queue_group_one_member_each(servers):
    for p in servers.values():
        data = b"CONNECT {}\r\nSUB foo q 1\r\nSUB foo q 2\r\nSUB foo 3\r\n" + b"PUB foo 1\r\nx\r\n" * 20 + b"PING\r\n"
        out, _ = converse(p.port, data)
        msgs = re.findall(rb"MSG foo (\d) 1\r\n", out)
        assert msgs.count(b"3") == 20
        assert msgs.count(b"1") + msgs.count(b"2") == 20, p.kind


def test_other_connections_unaffected_by_garbage(servers):
    p = servers["edged"]
    good = socket.create_connection(("127.0.0.1", p.port), timeout=2)
    good.recv(4096)
    good.sendall(b"CONNECT {}\r\nSUB x 1\r\nPING\r\n")
    time.sleep(0.1)
    good.recv(4096)
    for junk in (b"\x00\xff\xfe garbage\r\n", b"PUB x 99999999999\r\n", b"HPUB x 5 2\r\n", b"SUB " * 3000):
        converse(p.port, junk, wait=0.2)
    good.sendall(b"PUB x 2\r\nok\r\nPING\r\n")
    time.sleep(0.2)
    assert b"MSG x 1 2\r\nok\r\n" in good.recv(4096)
    good.close()


def test_info_fields_clients_read(servers):
    infos = {}
    for k, p in servers.items():
        s = socket.create_connection(("127.0.0.1", p.port), timeout=2)
        line = s.recv(4096).split(b"\r\n")[0]
        s.close()
        assert line.startswith(b"INFO ") and line.endswith(b" ")
        infos[k] = json.loads(line[5:])
    for field in ("server_id", "server_name", "version", "proto", "host", "port", "headers", "max_payload",
                  "client_id", "client_ip"):
        assert field in infos["edged"], field
        assert type(infos["edged"][field]) is type(infos["nats-server"][field]), field
    for field in ("proto", "headers", "max_payload", "host"):
        assert infos["edged"][field] == infos["nats-server"][field], field
    assert infos["edged"]["server_id"].startswith("N") and len(infos["edged"]["server_id"]) == 56
