"""Leafnodes: edged solicits links to a hub nats-server, and accepts leafs as their hub, as nats-server does.

- `codec`: the wire protocol, sans-I/O (bytes in, events out; encoders).
- `connection`: `LeafConnection`, the leafnode kind of connection (edged/connections/connection.py).
- `remote`: `RemoteLink` keeps one configured remote connected forever; `LeafNodeManager` runs them all,
  and the leafnode port when one is configured.
- `accept`: edged as a hub: `LeafAcceptor` (the leafnode port) and `AcceptedLeafConnection`.
- `dialing`: URLs, the nonce signature, the TCP dial; `proxy`: HTTP CONNECT tunnels; `websocket`: the
  `ws://`/`wss://` transport.

Wire facts come from ../shared/docs/leafnode-protocol.md (nats-server leafnode.go).
"""
