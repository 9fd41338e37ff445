"""Connections: the base every connection kind shares (reads, buffering, flushing), the front doors that accept them, the NATS client protocol and its connection, WebSocket framing."""
