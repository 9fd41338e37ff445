"""Message and state stores behind one interface: SQLite/WAL (file storage) and memory.

    store = SQLiteStore(store_dir, sync_interval)   # or MemoryStore()
    await store.open()
    st = store.create_stream("ORDERS", config_json)
    seq, ts, committed = st.append("orders.new", b"", b"payload")
    await committed                                  # the row is in SQLite: send the PubAck
"""

from edged.routing.subjects import CompiledFilter, compile_filter, is_literal, subject_matches
from storage.base import (
    DEFAULT_ACCOUNT,
    MAX_SEQ,
    Meta,
    Store,
    StoreClosedError,
    StoredMsg,
    StoreError,
    StoreFullError,
    Stream,
    StreamExistsError,
    StreamState,
)
from storage.memory import MemoryStore, MemoryStream
from storage.sqlite import SQLiteStore, SQLiteStream, parse_sync_interval

__all__ = [
    "DEFAULT_ACCOUNT",
    "MAX_SEQ",
    "Meta",
    "MemoryStore",
    "MemoryStream",
    "SQLiteStore",
    "SQLiteStream",
    "Store",
    "StoreClosedError",
    "StoreError",
    "StoreFullError",
    "StoredMsg",
    "Stream",
    "StreamExistsError",
    "StreamState",
    "CompiledFilter",
    "compile_filter",
    "is_literal",
    "parse_sync_interval",
    "subject_matches",
]
