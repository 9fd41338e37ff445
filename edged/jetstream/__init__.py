"""JetStream on SQLite/WAL: the engine's facade (engine.py) and its parts (lifecycle, dispatch, pubacks,
space, monitoring), an account's streams (account.py), stream rules and the publish path (stream.py),
consumers (consumer.py, consumer_config.py), the `$JS.API` handlers (api.py, consumer_api.py, direct.py),
nats-server's JSON reading (gojson.py) and its error table (errors.py)."""

from edged.jetstream.account import JSAccount
from edged.jetstream.engine import JetStream
from edged.jetstream.wire.dispatch import ApiRequest

__all__ = ["ApiRequest", "JSAccount", "JetStream"]
