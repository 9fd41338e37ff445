"""JetStream on SQLite/WAL: the engine (engine.py), stream rules and publish path (stream.py), the
`$JS.API` handlers (api.py) and nats-server's error table (errors.py)."""

from edged.jetstream.account import JSAccount
from edged.jetstream.dispatch import ApiRequest
from edged.jetstream.engine import JetStream

__all__ = ["ApiRequest", "JSAccount", "JetStream"]
