"""`Account.route_framed_run`: a run of deliveries as it crossed a leafnode (replies `<ack>@<subject>`) reaches
the only receiver as its columns when that receiver takes them, and otherwise nothing is delivered and the
caller is told to split the run (real accounts and in-process receivers, no sockets)."""

from __future__ import annotations

from typing import Any

from edged.routing.accounts import Account, InternalClient

REPLIES = [b"$JS.ACK.s.c.1.1.1.1.1@cmd.1", b"$JS.ACK.s.c.1.2.2.1.0@cmd.2"]
PAYLOADS = [b"one", b"two"]


def _origin() -> InternalClient:
    return Account("other").internal


def _plain(log: list[Any]) -> Any:
    return lambda sub, subject, reply, hdr, payload: log.append(payload)


def test_a_taker_gets_the_columns_once() -> None:
    acc = Account("A")
    log: list[Any] = []
    runs: list[Any] = []

    def framed(sub: Any, routed: bytes, replies: list[bytes], payloads: list[bytes]) -> bool:
        runs.append((routed, replies, payloads))
        return True

    sub = acc.internal.subscribe("d.x", _plain(log), batch=lambda s, r, m: log.append(m), framed=framed)
    assert acc.route_framed_run("d.x", b"d.x", REPLIES, PAYLOADS, 6, _origin())
    assert runs == [(b"d.x", REPLIES, PAYLOADS)] and log == [] and sub.delivered == 2


def test_a_refusal_delivers_nothing_and_counts_nothing() -> None:
    acc = Account("A")
    log: list[Any] = []
    sub = acc.internal.subscribe("d.x", _plain(log), batch=lambda s, r, m: log.append(m),
                                 framed=lambda s, r, replies, payloads: False)
    assert not acc.route_framed_run("d.x", b"d.x", REPLIES, PAYLOADS, 6, _origin())
    assert log == [] and sub.delivered == 0


def test_no_single_taker_is_a_refusal() -> None:
    """Without a `framed` callback, with two receivers, with nobody or without echo: False, nothing delivered."""
    acc = Account("A")
    assert not acc.route_framed_run("d.x", b"d.x", REPLIES, PAYLOADS, 6, _origin())
    log: list[Any] = []
    taken: list[Any] = []
    ic = acc.internal
    ic.subscribe("d.x", _plain(log), batch=lambda s, r, m: log.append(m))
    assert not acc.route_framed_run("d.x", b"d.x", REPLIES, PAYLOADS, 6, _origin())
    acc2 = Account("B")
    acc2.internal.subscribe("d.x", _plain(log), batch=lambda s, r, m: log.append(m),
                            framed=lambda s, r, replies, payloads: taken.append(replies) or True)
    InternalClient(acc2, "second").subscribe("d.*", _plain(log))
    assert not acc2.route_framed_run("d.x", b"d.x", REPLIES, PAYLOADS, 6, _origin())
    acc3 = Account("C")
    ic3 = acc3.internal
    ic3.subscribe("d.x", _plain(log), batch=lambda s, r, m: log.append(m),
                  framed=lambda s, r, replies, payloads: taken.append(replies) or True)
    ic3.echo = False
    assert not acc3.route_framed_run("d.x", b"d.x", REPLIES, PAYLOADS, 6, ic3)
    assert log == [] and taken == []
