"""Monitoring: nats-server's HTTP endpoints (/varz, /connz, /subsz, ...), a Prometheus /metrics page, and
the same documents over NATS as `$SYS.REQ.SERVER.*` requests.

documents.py builds the JSON documents from the Server; httpserver.py serves them on the HTTP port,
metrics.py renders /metrics, sysreqs.py answers the system-account requests; request.py and encoding.py
read options and write JSON the way nats-server's Go code does, so tools written for nats-server (nats
CLI, prometheus-nats-exporter, dashboards) read edged unchanged.

The names below are imported on first use, not with the package: the server imports sysreqs always and
httpserver only with a monitoring port, so a server without one does not load the HTTP side (start-up).
"""

from __future__ import annotations

import importlib
from typing import Any

_FROM = {
    **dict.fromkeys(("ConnzOptions", "HealthzOptions", "JszOptions", "SubszOptions", "account_info", "accountz",
                     "accstatz", "connz", "gatewayz", "healthz", "jsz", "leafz", "routez", "subsz", "varz"),
                    "documents"),
    "to_json": "encoding",
    "MonitorServer": "httpserver",
    "metrics": "metrics",
    **dict.fromkeys(("MonitorError", "parse_bool", "parse_int"), "request"),
    "install_system_handlers": "sysreqs",
}

__all__ = sorted(_FROM)


def __getattr__(name: str) -> Any:
    mod = _FROM.get(name)
    if mod is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{mod}"), name)
