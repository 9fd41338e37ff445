"""The appliance around the server: systemd, provisioning bundles and fleets, the link doctor, `edged status`."""
