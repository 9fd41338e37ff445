"""A throw-away PKI for TLS tests: a CA, a server cert for 127.0.0.1/localhost and a client cert."""

from __future__ import annotations

import datetime
import os
from typing import Any


def make_pki(workdir: str) -> dict[str, str]:
    """A test CA, a server cert for 127.0.0.1/localhost and a client cert; returns file paths."""
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.UTC)

    def name(cn: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    def write_key(key: Any, path: str) -> None:
        with open(path, "wb") as f:
            f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption()))

    def write_cert(cert: Any, path: str) -> None:
        with open(path, "wb") as f:
            f.write(cert.public_bytes(serialization.Encoding.PEM))

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (x509.CertificateBuilder().subject_name(name("edged test CA")).issuer_name(name("edged test CA"))
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=2))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False),
                         critical=True)
          .sign(ca_key, hashes.SHA256()))
    out = {"ca": os.path.join(workdir, "ca.pem")}
    write_cert(ca, out["ca"])
    for kind, eku in (("server", ExtendedKeyUsageOID.SERVER_AUTH), ("client", ExtendedKeyUsageOID.CLIENT_AUTH)):
        key = ec.generate_private_key(ec.SECP256R1())
        b = (x509.CertificateBuilder().subject_name(name(f"edged test {kind}")).issuer_name(ca.subject)
             .public_key(key.public_key()).serial_number(x509.random_serial_number())
             .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=2))
             .add_extension(x509.ExtendedKeyUsage([eku]), critical=False))
        if kind == "server":
            b = b.add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                             x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                                critical=False)
        cert = b.sign(ca_key, hashes.SHA256())
        out[f"{kind}_cert"] = os.path.join(workdir, f"{kind}-cert.pem")
        out[f"{kind}_key"] = os.path.join(workdir, f"{kind}-key.pem")
        write_cert(cert, out[f"{kind}_cert"])
        write_key(key, out[f"{kind}_key"])
    return out
