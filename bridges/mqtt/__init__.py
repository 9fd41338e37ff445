"""MQTT 3.1.1 / 5.0 front door: packets, the sans-I/O codec, topic <-> subject mapping."""
