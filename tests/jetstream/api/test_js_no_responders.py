"""Direct gets and pull requests nobody listens for, differential: nats-server's JetStream API import does
not carry `$JS.API.DIRECT.GET...` and `$JS.API.CONSUMER.MSG.NEXT.` subjects; only a stream with
`allow_direct` or a consumer answers them, through a subscription of its own. Without one, a requester
gets "no responders" (503) at once, not a timeout, and a subscriber of the client's own gets the request
alone."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from typing import Any

import nats
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout
from nats.js.api import ConsumerConfig

from tests.support.aio import run
from tests.support.servers import KINDS, ServerProcess

REQUESTS = [
    ("$JS.API.DIRECT.GET.X", b'{"seq":1}'),  # a stream without allow_direct
    ("$JS.API.DIRECT.GET.X.x", b""),
    ("$JS.API.DIRECT.GET.NOPE", b'{"seq":1}'),  # no such stream
    ("$JS.API.DIRECT.GET", b'{"seq":1}'),
    ("$JS.API.DIRECT.GET.D", b'{"seq":1}'),  # answered
    ("$JS.API.DIRECT.GET.D.d.x", b""),  # answered
    ("$JS.edge.API.DIRECT.GET.X", b'{"seq":1}'),  # the domain's subjects alike
    ("$JS.edge.API.DIRECT.GET.D", b'{"seq":1}'),
    ("$JS.API.CONSUMER.MSG.NEXT.X.NOPE", b'{"batch":1,"no_wait":true}'),  # no such consumer
    ("$JS.API.CONSUMER.MSG.NEXT.NOPE.PULL", b""),  # no such stream
    ("$JS.API.CONSUMER.MSG.NEXT.X.PULL.more", b""),
    ("$JS.API.CONSUMER.MSG.NEXT.X", b""),
    ("$JS.API.CONSUMER.MSG.NEXT", b""),  # not under the prefix: the API takes it and says nothing
    ("$JS.API.CONSUMER.MSG.NEXT.X.PUSH", b'{"batch":1,"expires":500000000}'),  # answered: 409
    # answered: the message, though on its own subject, which nats-py's request does not take for the reply
    ("$JS.API.CONSUMER.MSG.NEXT.X.PULL", b'{"batch":1,"no_wait":true}'),
    ("$JS.edge.API.CONSUMER.MSG.NEXT.X.NOPE", b""),
]


async def _outcome(nc: Any, subject: str, body: bytes) -> tuple[Any, ...]:
    try:
        m = await nc.request(subject, body, timeout=0.5)
    except NoRespondersError:
        return ("no responders",)
    except NatsTimeout:
        return ("timeout",)
    hdrs = m.headers or {}
    return ("reply", hdrs.get("Status"), hdrs.get("Description"), m.data)


async def _own(m: Any) -> None:
    await m.respond(b"mine")


async def _scenario(url: str) -> list[tuple[Any, ...]]:
    nc = await nats.connect(url)
    js = nc.jetstream()
    await js.add_stream(name="X", subjects=["x"])
    await js.publish("x", b"1")
    await js.add_stream(name="D", subjects=["d.>"], allow_direct=True)
    await js.publish("d.x", b"2")
    await js.add_consumer("X", ConsumerConfig(durable_name="PULL"))
    await js.add_consumer("X", ConsumerConfig(durable_name="PUSH", deliver_subject="nowhere"))
    out = [(subj, *await _outcome(nc, subj, body)) for subj, body in REQUESTS]
    # a subscriber of the client's own on such a subject: it alone answers
    for subj in ("$JS.API.DIRECT.GET.X", "$JS.API.CONSUMER.MSG.NEXT.X.NOPE"):
        sub = await nc.subscribe(subj, cb=_own)
        out.append(("own " + subj, *await _outcome(nc, subj, b"")))
        await sub.unsubscribe()
    await nc.close()
    return out


def test_requests_nobody_listens_for_get_no_responders(start_server: Callable[..., ServerProcess]) -> None:
    got = {}
    for kind in KINDS:
        conf = f'jetstream {{ store_dir: "{tempfile.mkdtemp(prefix="js-nores-")}", domain: "edge" }}\n'
        p = start_server(kind, config=conf)
        got[kind] = run(_scenario(p.url))
    edged, ref = got["edged"], got["nats-server"]
    assert sum(o[1] == "no responders" for o in ref) >= 8, ref  # the cases are what they are meant to be
    assert ("$JS.API.DIRECT.GET.D", "reply", None, None, b"2") in edged, edged  # a direct get answered
    bad = [f"\nedged: {e}\nnats:  {n}" for e, n in zip(edged, ref, strict=True) if e != n]
    assert not bad, "".join(bad)
