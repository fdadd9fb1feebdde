"""Does a SuperLink address speak TLS? Asked before a plaintext node starts.

A node started with ``--insecure`` against a SuperLink that serves TLS never gets
an answer it understands, and Flower 1.42's SuperNode retries that forever
without saying why. One TLS handshake (no certificate check: only the protocol
is asked, nothing is sent after it) tells the two apart in a fraction of a
second, so ``fedpath flower supernode`` can stop with the reason instead.
"""

from __future__ import annotations

import socket
import ssl

#: seconds the probe waits to connect and for the handshake
PROBE_TIMEOUT = 3.0


def split_address(address: str) -> tuple[str, int] | None:
    """``HOST:PORT`` (``[v6]:PORT`` for IPv6) as ``(host, port)``; None if not."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        return None
    return host.strip("[]"), int(port)


def speaks_tls(address: str, timeout: float = PROBE_TIMEOUT) -> bool | None:
    """True if ``address`` completes a TLS handshake, False if it answers
    without TLS (or stays silent), None if nothing can be reached there."""
    where = split_address(address)
    if where is None:
        return None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # which protocol, not whose certificate
    context.set_alpn_protocols(["h2", "http/1.1"])
    try:
        raw = socket.create_connection(where, timeout=timeout)
    except OSError:  # refused, unreachable, unknown name: the SuperLink is not up
        return None
    with raw:
        try:
            with context.wrap_socket(raw, server_hostname=where[0]):
                return True
        except (ssl.SSLError, OSError):  # a plaintext answer, a reset, a timeout
            return False
