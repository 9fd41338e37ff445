"""Monitoring: nats-server's HTTP endpoints (/varz, /connz, /subsz, ...), a Prometheus /metrics page, and
the same documents over NATS as `$SYS.REQ.SERVER.*` requests.

documents.py builds the JSON documents from the Server; httpserver.py serves them on the HTTP port,
metrics.py renders /metrics, sysreqs.py answers the system-account requests; request.py and encoding.py
read options and write JSON the way nats-server's Go code does, so tools written for nats-server (nats
CLI, prometheus-nats-exporter, dashboards) read edged unchanged.
"""

from edged.monitor.documents import (
    ConnzOptions,
    HealthzOptions,
    JszOptions,
    SubszOptions,
    account_info,
    accountz,
    accstatz,
    connz,
    gatewayz,
    healthz,
    jsz,
    leafz,
    routez,
    subsz,
    varz,
)
from edged.monitor.encoding import to_json
from edged.monitor.httpserver import MonitorServer
from edged.monitor.metrics import metrics
from edged.monitor.request import MonitorError, parse_bool, parse_int
from edged.monitor.sysreqs import install_system_handlers

__all__ = [
    "ConnzOptions",
    "HealthzOptions",
    "JszOptions",
    "MonitorError",
    "MonitorServer",
    "SubszOptions",
    "account_info",
    "accountz",
    "accstatz",
    "connz",
    "gatewayz",
    "healthz",
    "install_system_handlers",
    "jsz",
    "leafz",
    "metrics",
    "parse_bool",
    "parse_int",
    "routez",
    "subsz",
    "to_json",
    "varz",
]
