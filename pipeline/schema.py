"""The rows every read source yields, in Spark's DDL and as the Arrow schema of the batches read() returns."""

from __future__ import annotations

import pyarrow as pa

SCHEMA_DDL = ("stream string, seq long, subject string, time timestamp, "
              "headers map<string,array<string>>, data binary")

ARROW_SCHEMA = pa.schema([
    ("stream", pa.string()),
    ("seq", pa.int64()),
    ("subject", pa.string()),
    ("time", pa.timestamp("us", tz="UTC")),
    ("headers", pa.map_(pa.string(), pa.list_(pa.string()))),
    ("data", pa.binary()),
])
