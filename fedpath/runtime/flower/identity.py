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

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
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
    """client id -> OpenSSH public key line, from a registry file (module docstring).

    Every problem is a ConfigError naming the file, the client id and what was
    expected: a missing or unreadable file, a key given twice, an id that is not
    text, a value that is neither a key file nor an OpenSSH public key, two ids
    sharing one key.
    """
    from fedpath.utils.yaml_io import read_yaml_mapping

    where = f"client registry {str(path)!r}"
    expected = "a mapping 'client id: public key file'"
    raw = read_yaml_mapping(path, "client registry", expected)
    if not raw:
        raise ConfigError(f"{where}: expected {expected}, got an empty file")
    out: dict[str, str] = {}
    for cid, value in raw.items():
        if not isinstance(cid, str) or not cid.strip() or cid != cid.strip():
            raise ConfigError(
                f"{where}: {cid!r} is not a client id; expected text such as "
                "'hospital_0/c0'"
            )
        out[cid] = _public_key(path, where, cid, value)
    keys = [" ".join(k.split()[:2]) for k in out.values()]
    shared = sorted({k for k in keys if keys.count(k) > 1})
    if shared:
        owners = [c for c, k in out.items() if " ".join(k.split()[:2]) in shared]
        raise ConfigError(
            f"{where}: clients {owners} share one public key; each client id needs "
            "its own node key"
        )
    return out


def _public_key(path: Path, where: str, cid: str, value: object) -> str:
    """The OpenSSH public key line a registry entry names (the line itself, or a
    key file relative to the registry); errors name the entry, never the key
    file's content."""
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(
            f"{where}: client {cid!r}: expected a public key file (or an OpenSSH "
            f"public key line), got {type(value).__name__}"
        )
    text = value.strip()
    shown = "the key"
    if not text.startswith(("ecdsa-", "ssh-")):
        key_file = (path.parent / text).expanduser()
        shown = f"public key file {str(key_file)!r}"
        if not key_file.is_file():
            state = "is not a file" if key_file.exists() else "does not exist"
            raise ConfigError(f"{where}: client {cid!r}: {shown} {state}")
        try:
            lines = key_file.read_text(encoding="utf-8").strip().splitlines()
        except UnicodeDecodeError:
            lines = []  # binary: not an OpenSSH public key either
        except OSError as err:
            raise ConfigError(
                f"{where}: client {cid!r}: {shown} cannot be read: {err.strerror}"
            ) from None
        text = lines[0].strip() if lines else ""
    try:
        serialization.load_ssh_public_key(text.encode())
    except (ValueError, UnsupportedAlgorithm):
        raise ConfigError(
            f"{where}: client {cid!r}: {shown} is not an OpenSSH public key "
            "(expected one line such as 'ecdsa-sha2-nistp384 AAAA...', as "
            "`fedpath flower keys` writes to NAME.pub)"
        ) from None
    return text
