"""Configuration: nats-server's config syntax, its blocks turned into typed options."""
