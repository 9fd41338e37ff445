"""Monitoring documents as Go's encoding/json writes them, so typed Go decoders (nats CLI, exporters)
read edged's output unchanged."""

from __future__ import annotations

import json
from typing import Any


def _go_numbers(v: Any) -> Any:
    """Go marshals a float64 2.0 as `2`: integral floats become ints so typed Go decoders accept them."""
    if isinstance(v, float):
        if v.is_integer() and abs(v) < 1e21:
            return int(v)
        return v
    if isinstance(v, dict):
        return {k: _go_numbers(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_go_numbers(x) for x in v]
    return v


def to_json(doc: Any, indent: bool = False) -> bytes:
    """encoding/json output: integral floats as ints, and <, >, & escaped as \\u003c etc."""
    text = json.dumps(_go_numbers(doc), ensure_ascii=False, indent=2 if indent else None,
                      separators=(",", ": ") if indent else (",", ":"))
    # these characters only ever occur inside JSON strings, so a textual replace is exact
    text = text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")
    return text.encode()
