"""JetStream on SQLite/WAL: the engine (engine.py), stream rules and publish path (stream.py), the
`$JS.API` handlers (api.py) and nats-server's error table (errors.py)."""

from edged.jetstream.engine import ApiRequest, JetStream, JSAccount

__all__ = ["ApiRequest", "JSAccount", "JetStream"]
