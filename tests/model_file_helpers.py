"""Taking a model file apart and sealing it again, as a writer (not a tamperer)
would: the tests that hand the readers edited headers build them here."""

from __future__ import annotations

import hashlib
import json
import struct
from typing import Any

from fedpath.model_file import MAGIC

#: the magic, then the header's length as a little-endian 8-byte integer
_START = len(MAGIC) + 8


def split_model_file(blob: bytes) -> tuple[dict[str, Any], bytes]:
    """A model file's bytes as its decoded header and its payload (without the
    whole-file checksum, the last 32 bytes)."""
    (n,) = struct.unpack("<Q", blob[len(MAGIC) : _START])
    return json.loads(blob[_START : _START + n]), blob[_START + n : -32]


def seal_model_file(head: bytes, payload: bytes, checksum: bool = True) -> bytes:
    """A file around the header bytes ``head`` and ``payload``, its whole-file
    checksum appended (``checksum=False``: a format-1 file, which has none)."""
    body = MAGIC + struct.pack("<Q", len(head)) + head + payload
    return body + hashlib.sha256(body).digest() if checksum else body
