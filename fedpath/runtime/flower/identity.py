"""Client ids bound to node keys: a node proves it holds the key registered for
the client it claims.

Flower's node authentication lets only registered public keys connect, but a
node *declares* which fedpath client it serves. Without a binding, any
registered node (or any node of an insecure federation) could claim
``hospital_0/c0`` and have its update averaged in. With a registry at the
coordinator (``fedpath flower run --registry clients.yaml``)::

    # client id: that hospital's public key (a file beside this one, or the key)
    hospital_0/c0: keys/hospital_a.pub
    hospital_1/c0: keys/hospital_b.pub

the coordinator sends every new node a random challenge in its ``hello``; the
node signs (challenge, client id) with its private key (``--key`` of ``fedpath
flower supernode``, the key it authenticates with) and the coordinator accepts
the claim only if the signature verifies with the key registered for that id. A
claim of an id the registry does not list, a wrong signature, and a second node
claiming an id that a live node already serves are refused and logged.
"""

from __future__ import annotations

import secrets
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from fedpath.schema import ConfigError

#: node-config key: the node's private key file (OpenSSH PEM), to sign hellos
NC_IDENTITY_KEY = "identity-key"


def challenge() -> str:
    """A fresh random challenge (hex) for one node's hello."""
    return secrets.token_hex(16)


def _message(nonce: str, client_id: str) -> bytes:
    return f"fedpath hello v1\n{nonce}\n{client_id}".encode()


def sign_hello(key_file: Path, nonce: str, client_id: str) -> str:
    """The node's signature (hex) of (nonce, client id) with its private key."""
    try:
        key = serialization.load_ssh_private_key(key_file.read_bytes(), password=None)
    except (OSError, ValueError) as err:
        raise ConfigError(
            f"node config {NC_IDENTITY_KEY!r}: cannot read the private key "
            f"{str(key_file)!r}: {err}"
        ) from None
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ConfigError(
            f"node config {NC_IDENTITY_KEY!r}: {str(key_file)!r} is not an EC key "
            "(make one with `fedpath flower keys`)"
        )
    return key.sign(_message(nonce, client_id), ec.ECDSA(hashes.SHA256())).hex()


def verify_hello(public_key: str, nonce: str, client_id: str, signature: str) -> bool:
    """True if ``signature`` is (nonce, client id) signed by ``public_key``'s owner."""
    try:
        key = serialization.load_ssh_public_key(public_key.encode())
        if not isinstance(key, ec.EllipticCurvePublicKey):
            return False
        key.verify(
            bytes.fromhex(signature),
            _message(nonce, client_id),
            ec.ECDSA(hashes.SHA256()),
        )
    except (InvalidSignature, ValueError, TypeError):
        return False
    return True


def load_registry(path: Path) -> dict[str, str]:
    """client id -> OpenSSH public key line, from a registry file (module docstring)."""
    from fedpath.utils.yaml_io import read_yaml_mapping

    where = f"client registry {str(path)!r}"
    expected = "a mapping 'client id: public key file'"
    raw = read_yaml_mapping(path, "client registry", expected)
    if not raw:
        raise ConfigError(f"{where}: expected {expected}")
    out: dict[str, str] = {}
    for cid, value in raw.items():
        text = str(value).strip()
        if not text.startswith(("ecdsa-", "ssh-")):
            key_file = (path.parent / text).expanduser()
            if not key_file.is_file():
                raise ConfigError(
                    f"{where}: client {cid!r}: public key file {str(key_file)!r} "
                    "does not exist"
                )
            text = key_file.read_text().strip().splitlines()[0]
        try:
            serialization.load_ssh_public_key(text.encode())
        except ValueError as err:
            raise ConfigError(
                f"{where}: client {cid!r}: not an OpenSSH public key: {err}"
            ) from None
        out[str(cid)] = text
    keys = [" ".join(k.split()[:2]) for k in out.values()]
    shared = sorted({k for k in keys if keys.count(k) > 1})
    if shared:
        owners = [c for c, k in out.items() if " ".join(k.split()[:2]) in shared]
        raise ConfigError(
            f"{where}: clients {owners} share one public key; each client id needs "
            "its own node key"
        )
    return out
