"""edged: an edge gateway that speaks NATS, MQTT and JetStream."""

__version__ = "0.1.0"
# The nats-server version edged reports to clients and hubs (wire-compatible target).
SERVER_VERSION = "2.10.0"
