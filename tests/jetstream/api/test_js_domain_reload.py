"""A JetStream domain changed in the config file and applied by SIGHUP (issue 21 §3: provisioning must not need
a restart). edged answers as the new domain at once (`$JS.API.INFO`, `$JS.<domain>.API`, PubAcks, INFO, /jsz,
/varz) and the old domain goes quiet; streams keep their messages. nats-server refuses this reload ("config
reload not supported for JetStreamDomain") and keeps its old domain: the second test pins that difference,
which README documents."""

from __future__ import annotations

import json
import os
import signal
import urllib.request
from collections.abc import Callable
from typing import Any

import nats
from nats.errors import NoRespondersError

from tests.support.aio import eventually, run
from tests.support.servers import ServerProcess, free_port


def conf(store: str, domain: str) -> str:
    line = f", domain: {domain}" if domain else ""
    return f"jetstream {{ store_dir: {json.dumps(store)}{line} }}\n"


def rewrite(srv: ServerProcess, text: str) -> None:
    with open(os.path.join(srv.workdir, "server.conf"), "w") as f:
        f.write(text)
    srv.signal(signal.SIGHUP)


async def ask(nc: Any, subject: str) -> dict[str, Any] | str:
    try:
        return json.loads((await nc.request(subject, b"", timeout=2)).data)
    except NoRespondersError:
        return "no responders"


def monitor(port: int, path: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/{path}", timeout=3) as r:
        return json.loads(r.read())


def test_edged_applies_a_new_domain_on_reload(start_server: Callable[..., ServerProcess], tmp_path: Any) -> None:
    store = str(tmp_path / "store")
    http = free_port()
    srv = start_server("edged", config=conf(store, ""), http_port=http)

    async def main() -> None:
        nc = await nats.connect(srv.url)
        try:
            js = nc.jetstream()
            await js.add_stream(name="S", subjects=["s.>"])
            for i in range(3):
                ack = await js.publish(f"s.{i}", b"x")
                assert ack.domain is None
            # none -> "alpha" -> "beta": each time the API answers as the new domain only
            for old, new in (("", "alpha"), ("alpha", "beta")):
                rewrite(srv, conf(store, new))

                async def switched(new: str = new) -> bool:
                    info = await ask(nc, "$JS.API.INFO")
                    return isinstance(info, dict) and info.get("domain") == new

                await eventually(switched, 10, f"$JS.API.INFO in domain {new!r}")
                si = await ask(nc, f"$JS.{new}.API.STREAM.INFO.S")
                assert isinstance(si, dict) and si["state"]["messages"] == 3 + (old != "")
                assert si.get("domain") == new
                if old:
                    assert await ask(nc, f"$JS.{old}.API.INFO") == "no responders"
                ack = await js.publish("s.more", b"y")
                assert ack.domain == new and ack.stream == "S"
                # the nats-py client's own domain option reaches it too
                assert (await nc.jetstream(domain=new).stream_info("S")).state.messages == 4 + (old != "")
                assert monitor(http, "jsz")["config"]["domain"] == new
                assert monitor(http, "varz")["jetstream"]["config"]["domain"] == new
                fresh = await nats.connect(srv.url)
                try:
                    assert fresh._server_info.get("domain") == new
                finally:
                    await fresh.close()
            # back to no domain: only $JS.API answers
            rewrite(srv, conf(store, ""))

            async def plain() -> bool:
                info = await ask(nc, "$JS.API.INFO")
                return isinstance(info, dict) and "domain" not in info

            await eventually(plain, 10, "$JS.API.INFO without a domain")
            assert await ask(nc, "$JS.beta.API.INFO") == "no responders"
            assert (await js.stream_info("S")).state.messages == 5
        finally:
            await nc.close()

    run(main())


def test_nats_server_refuses_the_domain_reload(start_server: Callable[..., ServerProcess], tmp_path: Any) -> None:
    """The difference edged makes on purpose: nats-server logs the refusal and keeps answering as the old
    domain."""
    store = str(tmp_path / "store")
    srv = start_server("nats-server", config=conf(store, "alpha"))

    async def main() -> None:
        nc = await nats.connect(srv.url)
        try:
            rewrite(srv, conf(store, "beta"))

            async def refused() -> bool:
                return "config reload not supported for JetStreamDomain" in srv.log_tail(20000)

            await eventually(refused, 10, "nats-server's reload refusal in its log")
            info = await ask(nc, "$JS.API.INFO")
            assert isinstance(info, dict) and info.get("domain") == "alpha"
            assert await ask(nc, "$JS.beta.API.INFO") == "no responders"
        finally:
            await nc.close()

    run(main())
