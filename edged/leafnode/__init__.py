"""Leafnode remotes: edged solicits links to a hub nats-server, exactly as a nats-server leaf does.

- `codec`: the wire protocol, sans-I/O (bytes in, events out; encoders).
- `connection`: `LeafConnection`, the leafnode kind of connection (edged/connection.py).
- `remote`: `RemoteLink` keeps one configured remote connected forever; `LeafNodeManager` runs them all.
- `dialing`: URLs, the nonce signature, the TCP dial; `proxy`: HTTP CONNECT tunnels; `websocket`: the
  `ws://`/`wss://` transport.

Wire facts come from ../shared/docs/leafnode-protocol.md (nats-server leafnode.go).
"""
