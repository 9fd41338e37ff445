"""Who may connect and what they may do: users, nkeys, JWTs, creds files, permissions, TLS contexts."""
