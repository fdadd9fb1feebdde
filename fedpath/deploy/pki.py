"""Certificates and keys for a Flower federation: a private CA, node key pairs.

For tests and first trials (``fedpath flower certs`` / ``keys``); a hospital would
use certificates from its own PKI. Private keys are created readable by their
owner only (:func:`write_private`).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

#: The SuperLink's names when everything runs on one machine.
LOCALHOST = ("127.0.0.1", "localhost")


@dataclass(frozen=True)
class TlsFiles:
    """A CA certificate and a server certificate + key signed by it (PEM files)."""

    ca_cert: Path
    server_cert: Path
    server_key: Path


def make_certificates(
    folder: Path, hosts: Sequence[str] = LOCALHOST, days: int = 365
) -> TlsFiles:
    """A private CA and a SuperLink certificate for ``hosts`` (IPs or DNS names).

    For tests and first trials; a hospital would use certificates from its own
    PKI. The server certificate's subject alternative names must contain the
    address the SuperNodes and the ``flwr`` CLI use to reach the SuperLink.
    """
    folder.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fedpath test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = []
    for h in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            names.append(x509.DNSName(h))
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    files = TlsFiles(folder / "ca.crt", folder / "server.pem", folder / "server.key")
    files.ca_cert.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    files.server_cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    write_private(
        files.server_key,
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
    )
    return files


def make_node_keys(folder: Path, name: str) -> tuple[Path, Path]:
    """An EC (NIST P-384) key pair for SuperNode authentication, OpenSSH format.

    Same as ``ssh-keygen -t ecdsa -b 384 -N "" -f FOLDER/NAME``: the private key
    stays on the node (``--auth-supernode-private-key``), the public key is
    registered at the SuperLink (``flwr supernode register NAME.pub``).
    """
    folder.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP384R1())
    private, public = folder / name, folder / f"{name}.pub"
    write_private(
        private,
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.OpenSSH,
            serialization.NoEncryption(),
        ),
    )
    public.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
        )
        + f" {name}\n".encode()
    )
    return private, public


def write_private(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path``, a new file created with mode 0600.

    The mode is given to ``open`` itself, so the key is never readable by others,
    not even between creating the file and a ``chmod``; an existing file keeps its
    mode.
    """
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
