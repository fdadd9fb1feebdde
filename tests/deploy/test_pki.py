"""A private CA whose server certificate verifies for the SuperLink's names, and
node key pairs whose private halves only their owner can read."""

from __future__ import annotations

import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from fedpath.deploy.pki import make_certificates, make_node_keys


def test_server_certificate_is_signed_by_the_ca_for_its_hosts(tmp_path: Path) -> None:
    files = make_certificates(tmp_path / "certs", hosts=("10.1.2.3", "link.example"))
    ca = x509.load_pem_x509_certificate(files.ca_cert.read_bytes())
    cert = x509.load_pem_x509_certificate(files.server_cert.read_bytes())
    cert.verify_directly_issued_by(ca)  # raises if the CA did not sign it
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("10.1.2.3")]
    assert san.get_values_for_type(x509.DNSName) == ["link.example"]
    key = serialization.load_pem_private_key(files.server_key.read_bytes(), None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    served = cert.public_key()
    assert isinstance(served, ec.EllipticCurvePublicKey)
    assert key.public_key().public_numbers() == served.public_numbers()
    assert files.server_key.stat().st_mode & 0o777 == 0o600


def test_node_keys_are_a_p384_openssh_pair(tmp_path: Path) -> None:
    private, public = make_node_keys(tmp_path / "keys", "hospital_a")
    assert private.stat().st_mode & 0o777 == 0o600
    key = serialization.load_ssh_private_key(private.read_bytes(), password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    assert key.curve.name == "secp384r1"
    text = public.read_text()
    assert text.startswith("ecdsa-sha2-nistp384 ") and text.endswith(" hospital_a\n")
    pub = serialization.load_ssh_public_key(text.encode())
    assert isinstance(pub, ec.EllipticCurvePublicKey)
    assert pub.public_numbers() == key.public_key().public_numbers()
