"""The router: accounts, their imports/exports/mappings, subject interest, the receiver contract, and the subject and header grammar every part shares."""
