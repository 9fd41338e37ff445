"""`Account.route_as_batch`: a run of JetStream deliveries matched on one subject reaches a receiver that
takes the run whole in one `deliver_routed_batch` call, and everyone else exactly as `route_as` message by
message would (real accounts and in-process receivers, no sockets)."""

from __future__ import annotations

from typing import Any

from edged.routing.accounts import Account, InternalClient
from edged.routing.receiver import Message

MSGS: list[Message] = [
    (b"cmd.1", b"$JS.ACK.s.c.1.1.1.1.2", None, b"one"),
    (b"cmd.2", b"$JS.ACK.s.c.1.2.2.1.1", b"NATS/1.0\r\nA: b\r\n\r\n", b"two"),
    (b"cmd.1", b"", None, b""),
]
NBYTES = sum(len(m[3]) + len(m[2] or b"") for m in MSGS)


def _plain(log: list[Any], tag: str) -> Any:
    return lambda sub, subject, reply, hdr, payload: log.append((tag, subject, reply, hdr, payload))


def _origin() -> InternalClient:
    return Account("other").internal


def test_a_run_reaches_its_only_receiver_whole() -> None:
    acc = Account("A")
    log: list[Any] = []
    runs: list[Any] = []
    sub = acc.internal.subscribe("d.x", _plain(log, "one"), batch=lambda s, routed, msgs: runs.append((routed, msgs)))
    acc.route_as_batch("d.x", b"d.x", MSGS, NBYTES, _origin(), ())
    assert runs == [(b"d.x", MSGS)] and log == []
    assert sub.delivered == len(MSGS)


def test_without_a_whole_run_taker_it_goes_message_by_message() -> None:
    """Two receivers, one that takes runs and one that does not: each gets every message in order under
    the message's own subject, as `route_as` gives them."""
    expected: list[Any] = []
    for how in ("route_as", "batch"):
        acc = Account("A")
        log: list[Any] = []
        runs: list[Any] = []
        acc.internal.subscribe("d.x", _plain(log, "a"), batch=lambda s, routed, msgs, runs=runs: runs.append(msgs))
        InternalClient(acc, "second").subscribe("d.*", _plain(log, "b"))
        origin = _origin()
        if how == "route_as":
            for m in MSGS:
                acc.route_as("d.x", b"d.x", m[0], m[1], m[2], m[3], origin, ())
            expected = log
        else:
            acc.route_as_batch("d.x", b"d.x", MSGS, NBYTES, origin, ())
            assert runs == [] and log == expected
    for tag in ("a", "b"):
        assert [e[1:] for e in expected if e[0] == tag] == [
            (m[0].decode(), m[1].decode(), m[2], m[3]) for m in MSGS]


def test_an_auto_unsubscribe_limit_is_kept() -> None:
    acc = Account("A")
    log: list[Any] = []
    runs: list[Any] = []
    sub = acc.internal.subscribe("d.x", _plain(log, "a"), batch=lambda s, routed, msgs: runs.append(msgs))
    sub.max = 2
    acc.route_as_batch("d.x", b"d.x", MSGS, NBYTES, _origin(), ())
    assert runs == [] and [e[4] for e in log] == [b"one", b"two"] and sub.closed


def test_no_receiver_and_no_echo() -> None:
    acc = Account("A")
    acc.route_as_batch("d.x", b"d.x", MSGS, NBYTES, _origin(), ())  # nobody: nothing happens
    log: list[Any] = []
    runs: list[Any] = []
    ic = acc.internal
    ic.subscribe("d.x", _plain(log, "a"), batch=lambda s, routed, msgs: runs.append(msgs))
    ic.echo = False  # a receiver that must not get back what it sends itself
    acc.route_as_batch("d.x", b"d.x", MSGS, NBYTES, ic, ())
    assert runs == [] and log == []
