"""The JetStream API on the wire: request dispatch, the handlers, errors, Go's JSON texts, domains and asset versioning."""
