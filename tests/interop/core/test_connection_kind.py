"""A new connection kind in a few lines, as ARCHITECTURE.md shows it: subclass `Connection`, give it a
sans-I/O parser, frame deliveries in its own protocol, register one listener. Driven against a real
nats-py client: a line published through the new kind reaches the NATS subscriber, and a NATS publish
reaches the line client, with no change to the router or the server."""

from __future__ import annotations

import asyncio
from typing import Any

import nats

from edged.connections.connection import Connection
from edged.routing.receiver import Subscription
from edged.server import Listener, Server
from edged.settings.options import Options
from tests.support.aio import run
from tests.support.servers import free_port


class LineParser:
    """Sans-I/O: `SUB <subject>` and `PUB <subject> <text>` lines in, (op, args) events out."""

    def __init__(self) -> None:
        self.buf = b""

    def feed(self, data: bytes) -> list[tuple[bytes, bytes]]:
        self.buf += data
        *lines, self.buf = self.buf.split(b"\n")
        return [(op, rest) for op, _, rest in (line.partition(b" ") for line in lines)]


class LineConnection(Connection):
    kind = "Line"

    def __init__(self, server: Server) -> None:
        super().__init__(server)
        self.parser = LineParser()
        self.account = server.lookup_account("$G")

    def _connected(self, transport: Any) -> None:
        self.server.register_client(self)

    def process(self, events: list[tuple[bytes, bytes]]) -> None:
        for op, rest in events:
            if op == b"SUB":
                sub = Subscription(self, rest.decode(), None, str(len(self.subs) + 1))
                self.subs[sub.sid] = sub
                self.account.subscribe(sub)
            elif op == b"PUB":
                subject, _, text = rest.partition(b" ")
                self.in_msgs += 1
                self.account.route(subject.decode(), subject, b"", None, text, self)

    def deliver(self, sub: Subscription, subject: bytes, reply: bytes, hdr: bytes | None, payload: bytes) -> None:
        sub.delivered += 1
        self.out_msgs += 1
        line = b"MSG %s %s\n" % (subject, payload)
        self.out.append(line)
        self.queued(len(line))

    def auto_unsubscribe(self, sub: Subscription) -> None:
        if self.subs.pop(sub.sid, None) is not None:
            self.account.unsubscribe(sub)

    def _release(self) -> None:
        for sub in self.subs.values():
            self.account.unsubscribe(sub)
        self.server.unregister_client(self)


def test_a_connection_kind_added_by_subclassing_and_one_listener() -> None:
    async def main() -> None:
        opts = Options()
        opts.port = free_port()
        srv = Server(opts)
        line_port = free_port()
        srv.add_listener(Listener("line", "127.0.0.1", line_port, lambda: LineConnection(srv)))
        await srv.start()
        try:
            nc = await nats.connect(f"nats://127.0.0.1:{srv.client_port}")
            got: asyncio.Queue = asyncio.Queue()

            async def on_msg(m: Any) -> None:
                got.put_nowait((m.subject, m.data))

            await nc.subscribe("sensors.>", cb=on_msg)
            await nc.flush()
            reader, writer = await asyncio.open_connection("127.0.0.1", line_port)
            writer.write(b"SUB cmd.*\nPUB sensors.t1 21.5\n")
            await writer.drain()
            assert await asyncio.wait_for(got.get(), 5) == ("sensors.t1", b"21.5")
            for _ in range(50):  # the line client's SUB is processed before its PUB; wait for the NATS side
                if srv.accounts["$G"].sublist.match("cmd.x")[0]:
                    break
                await asyncio.sleep(0.02)
            await nc.publish("cmd.fan", b"on")
            await nc.publish("other", b"ignored")
            await nc.flush()
            assert await asyncio.wait_for(reader.readline(), 5) == b"MSG cmd.fan on\n"
            conns = [c for c in srv.clients.values() if isinstance(c, LineConnection)]
            assert len(conns) == 1 and conns[0].in_msgs == 1 and conns[0].out_msgs == 1
            writer.close()
            await nc.close()
            for _ in range(50):
                if not any(isinstance(c, LineConnection) for c in srv.clients.values()):
                    break
                await asyncio.sleep(0.02)
            assert not srv.accounts["$G"].sublist.match("cmd.x")[0]  # its subscription went with it
        finally:
            await srv.shutdown()

    run(main(), 60)
