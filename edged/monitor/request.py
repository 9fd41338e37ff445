"""Monitoring request options read as nats-server reads them (Go's URL.Query() and strconv, with its
error texts), so a bad query gets the same 400 body from edged as from nats-server."""

from __future__ import annotations

from urllib.parse import parse_qs


class MonitorError(ValueError):
    """A bad monitoring request; HTTP answers 400 with the text, $SYS requests an API error."""

    def __init__(self, text: str, code: int = 400) -> None:
        super().__init__(text)
        self.code = code


def parse_bool(name: str, value: str | None) -> bool:
    """strconv.ParseBool with nats-server's error text."""
    if value is None or value == "":
        return False
    if value in ("1", "t", "T", "TRUE", "true", "True"):
        return True
    if value in ("0", "f", "F", "FALSE", "false", "False"):
        return False
    raise MonitorError(f"Error decoding boolean for '{name}': strconv.ParseBool: parsing \"{value}\": invalid syntax")


def parse_int(name: str, value: str | None, unsigned: bool = False) -> int:
    if value is None or value == "":
        return 0
    s = value[1:] if value[:1] in "+-" and not unsigned else value
    if not s.isascii() or not s.isdigit():
        fn = "strconv.ParseUint" if unsigned else "strconv.Atoi"
        kind = "uint64" if unsigned else "int"
        raise MonitorError(f"Error decoding {kind} for '{name}': {fn}: parsing \"{value}\": invalid syntax")
    return int(value)


def query_values(qs: str) -> dict[str, str]:
    """Go's URL.Query().Get(): first value of each key, blanks kept."""
    out: dict[str, str] = {}
    for k, vals in parse_qs(qs, keep_blank_values=True).items():
        out[k] = vals[0]
    return out
