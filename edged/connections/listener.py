"""A front door of the server: where it listens and what it makes of each accepted socket. Its own module
so that front doors inside `edged/` (the leafnode port) can make one without importing the server."""

from __future__ import annotations

import asyncio
import errno
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# hosts that mean "every address": Go's net.Listen("tcp", ...) opens one IPv6 socket that takes IPv4 too
WILDCARD_HOSTS = ("0.0.0.0", "", "::", "[::]")


@dataclass
class Listener:
    """A front door: where it listens and what it makes of each accepted socket. The NATS client port is
    one, the leafnode port another (edged/leafnode/accept.py); front doors in bridges/ (MQTT, WebSocket)
    are registered from the composition root (edged/app.py) with `Server.add_listener`, so the server
    never imports them."""

    name: str  # what the log calls its connections: "client", "mqtt", "websocket"
    host: str
    port: int  # 0 or -1: any free port
    factory: Callable[[], asyncio.BaseProtocol]
    ssl: ssl.SSLContext | None = None
    ssl_handshake_timeout: float | None = None
    bound_port: int = 0  # the port it listens on, once started
    server: asyncio.base_events.Server | None = field(default=None, repr=False)


def dual_stack_socket(host: str, port: int, backlog: int = 1024) -> socket.socket | None:
    """A listening socket for a wildcard host as nats-server (Go) opens it: IPv6 with IPV6_V6ONLY off, so
    clients reach it over IPv4 and IPv6 (`nats://[::1]:4222` as well as `nats://127.0.0.1:4222`). None for
    any other host, or where the kernel has no IPv6: the caller then listens as asked, on IPv4. A bind that
    fails for another reason (the port is taken) raises, as listening on IPv4 would."""
    if host not in WILDCARD_HOSTS or not socket.has_ipv6:
        return None
    try:
        sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    except OSError:
        return None
    try:
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("::", port))
        sock.listen(backlog)
        sock.setblocking(False)
    except OSError as e:
        sock.close()
        if e.errno in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT, errno.EPROTONOSUPPORT, errno.ENOPROTOOPT):
            return None  # IPv6 turned off on this host
        raise
    return sock


def peer_address(peer: Any) -> tuple[str, int]:
    """A socket's peer as nats-server reports it (client_ip, /connz ip, logs): an IPv4 client of a dual-stack
    socket is `127.0.0.1`, as Go prints it, not `::ffff:127.0.0.1`."""
    host = peer[0]
    if host.startswith("::ffff:") and "." in host:
        host = host[7:]
    return host, peer[1]
