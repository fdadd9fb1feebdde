"""Telling a TLS SuperLink from a plaintext one before a ``--insecure`` node starts
(a local TLS server with fedpath's trial certificates, a plaintext HTTP one)."""

from __future__ import annotations

import socket
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from fedpath.deploy import pki
from fedpath.deploy.processes import free_port
from fedpath.deploy.tls_probe import speaks_tls, split_address


def serve(listener: socket.socket, wrap: ssl.SSLContext | None) -> None:
    """Answer connections until the listener closes: a TLS handshake (``wrap``) or
    an HTTP 400 to whatever arrives (what a plaintext HTTP server does)."""
    while True:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        with conn:
            try:
                if wrap is not None:
                    with wrap.wrap_socket(conn, server_side=True) as tls:
                        tls.recv(1)
                else:
                    conn.recv(1024)
                    conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")
            except (OSError, ssl.SSLError):
                continue


@pytest.fixture
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """``HOST:PORT`` of a TLS (param True) or plaintext (False) server."""
    wrap = None
    if request.param:
        files = pki.make_certificates(tmp_path / "certs")
        wrap = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        wrap.load_cert_chain(files.server_cert, files.server_key)
    listener = socket.create_server(("127.0.0.1", 0))
    thread = threading.Thread(target=serve, args=(listener, wrap), daemon=True)
    thread.start()
    yield f"127.0.0.1:{listener.getsockname()[1]}"
    listener.close()
    thread.join(5)


@pytest.mark.parametrize("server", [True], indirect=True)
def test_a_tls_server_is_recognised(server: str) -> None:
    assert speaks_tls(server) is True


@pytest.mark.parametrize("server", [False], indirect=True)
def test_a_plaintext_server_is_not_tls(server: str) -> None:
    assert speaks_tls(server) is False


def test_nothing_listening_or_no_address_is_unknown() -> None:
    assert speaks_tls(f"127.0.0.1:{free_port()}") is None
    assert speaks_tls("no-port-here") is None
    assert split_address("[::1]:9092") == ("::1", 9092)
    assert split_address("host:99999") is None


@pytest.mark.parametrize("server", [True], indirect=True)
def test_a_plaintext_node_against_tls_stops_with_the_reason(
    server: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``fedpath flower supernode --insecure`` against a TLS SuperLink: one error
    line and exit 2, before Flower (which would retry forever) starts."""
    pytest.importorskip("flwr")
    from fedpath.cli import main

    argv = ["flower", "supernode", "--superlink", server, "--insecure"]
    argv += ["--client-id", "hospital_0/c0", "--no-worker", "--no-app-approval"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"--superlink {server} expects TLS" in err and "--ca" in err
