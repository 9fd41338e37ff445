"""The durable bridge to an upstream MQTT broker (`edged { mqtt_bridge [...] }`); see service.py."""
