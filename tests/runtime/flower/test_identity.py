"""Client ids bound to node keys: a node must sign its hello with the key the
coordinator's registry holds for the id it claims; rogue and duplicate claims
are refused (through the real ClientApp over the loopback grid)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("flwr")

from fedpath.config import ConfigError
from fedpath.deploy import pki
from fedpath.runtime.flower.identity import (
    NC_IDENTITY_KEY,
    challenge,
    load_registry,
    sign_hello,
    verify_hello,
)
from tests.flower_helpers import (
    assert_same_run,
    config,
    in_process,
    records,
    run_over_grid,
)


def keys(tmp: Path, *names: str) -> dict[str, tuple[Path, Path]]:
    return {n: pki.make_node_keys(tmp / "keys", n) for n in names}


def test_signature_binds_the_nonce_the_client_and_the_key(tmp_path: Path) -> None:
    k = keys(tmp_path, "a", "b")
    pub_a = k["a"][1].read_text().strip()
    nonce = challenge()
    sig = sign_hello(k["a"][0], nonce, "hospital_0/c0")
    assert verify_hello(pub_a, nonce, "hospital_0/c0", sig)
    assert not verify_hello(pub_a, nonce, "hospital_1/c0", sig)  # another id
    assert not verify_hello(pub_a, challenge(), "hospital_0/c0", sig)  # replayed
    other = sign_hello(k["b"][0], nonce, "hospital_0/c0")
    assert not verify_hello(pub_a, nonce, "hospital_0/c0", other)  # another key
    assert not verify_hello(pub_a, nonce, "hospital_0/c0", "zz")


def test_registry_file(tmp_path: Path) -> None:
    k = keys(tmp_path, "a", "b")
    reg = tmp_path / "clients.yaml"
    reg.write_text("hospital_0/c0: keys/a.pub\nhospital_1/c0: keys/b.pub\n")
    out = load_registry(reg)
    assert out["hospital_0/c0"] == k["a"][1].read_text().strip()
    reg.write_text("hospital_0/c0: keys/a.pub\nhospital_1/c0: keys/a.pub\n")
    with pytest.raises(ConfigError, match="share one public key"):
        load_registry(reg)
    reg.write_text("hospital_0/c0: keys/missing.pub\n")
    with pytest.raises(ConfigError, match="'hospital_0/c0': public key file .*missing"):
        load_registry(reg)
    reg.write_text("hospital_0/c0: ecdsa-sha2-nistp384 AAAAnotakey\n")
    with pytest.raises(ConfigError, match="not an OpenSSH public key"):
        load_registry(reg)


def _node(cid: str, key: Path | None) -> dict[str, str]:
    return {"client-id": cid, **({NC_IDENTITY_KEY: str(key)} if key else {})}


@pytest.mark.usefixtures("task_identity")
def test_a_rogue_node_claiming_a_registered_id_is_refused(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    k = keys(tmp_path, "a", "b", "rogue")
    registry = {
        "hospital_0/c0": k["a"][1].read_text().strip(),
        "hospital_1/c0": k["b"][1].read_text().strip(),
    }
    nodes = {
        100: _node("hospital_0/c0", k["a"][0]),
        101: _node("hospital_1/c0", k["b"][0]),
        102: _node("hospital_0/c0", k["rogue"][0]),  # its own key, someone's id
        103: _node("hospital_1/c0", None),  # no key at all
    }
    cfg = config(tmp_path / "flower")
    run_over_grid(cfg, nodes, registry=registry)
    assert [r["client_ids"] for r in records(cfg, "identity")] == ["registry"]
    log = [r.getMessage() for r in caplog.records]
    assert any(
        "node 102 claims client hospital_0/c0 but did not sign" in m for m in log
    )
    assert any(
        "node 103 claims client hospital_1/c0 but did not sign" in m for m in log
    )
    assert records(cfg, "failure") == []
    assert_same_run(cfg, in_process(tmp_path))  # only the genuine updates count


@pytest.mark.usefixtures("task_identity")
@pytest.mark.parametrize("bound", [False, True])
def test_two_nodes_claiming_one_id_stop_the_run(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, bound: bool
) -> None:
    """Neither claim can be told genuine, so neither node is used, and the run
    stops with the reason instead of finishing without that hospital (it used to
    finish, exit 0, with hospital_1 a failure record). With a registry only the
    key's holder can claim the id, so a second claim is the key used twice."""
    k = keys(tmp_path, "a", "b")
    key = {c: k[n][0] if bound else None for c, n in (("h0", "a"), ("h1", "b"))}
    nodes = {
        100: _node("hospital_0/c0", key["h0"]),
        101: _node("hospital_1/c0", key["h1"]),
        102: _node("hospital_1/c0", key["h1"]),
    }
    registry = None
    if bound:
        registry = {
            "hospital_0/c0": k["a"][1].read_text().strip(),
            "hospital_1/c0": k["b"][1].read_text().strip(),
        }
    cfg = config(tmp_path / "flower")
    with pytest.raises(
        RuntimeError,
        match=r"the run stops: .*client hospital_1/c0 by nodes \[101, 102\]",
    ):
        run_over_grid(cfg, nodes, registry=registry, wait_nodes=30.0)
    log = [r.getMessage() for r in caplog.records]
    assert any("client ids are self-declared" in m for m in log) is not bound
    assert any(
        "nodes [101, 102] all claim client hospital_1/c0; none" in m for m in log
    )
    (ident,) = records(cfg, "identity")
    assert ident["client_ids"] == ("registry" if bound else "self-declared")
    assert records(cfg, "round") == []  # stopped before any round


def test_registry_file_errors_name_the_file_and_the_entry(tmp_path: Path) -> None:
    k = keys(tmp_path, "a")
    reg = tmp_path / "clients.yaml"
    where = f"client registry '{reg}'"
    secret = "TOP-SECRET-LINE"
    (tmp_path / "keys" / "text.pub").write_text(f"{secret}\n")
    (tmp_path / "keys" / "binary.pub").write_bytes(b"\xff\xfe\x00")
    (tmp_path / "keys" / "empty.pub").write_text("")
    cases = {
        "": "expected a mapping .* got an empty file",
        "- a\n- b\n": "expected a mapping",
        "h/c0: keys/a.pub\nh/c0: keys/a.pub\n": "key 'h/c0' is given twice",
        "1: keys/a.pub\n": "1 is not a client id",
        "~: keys/a.pub\n": "None is not a client id",
        "' h/c0': keys/a.pub\n": "' h/c0' is not a client id",
        "h/c0:\n": "'h/c0': expected a public key file .* got NoneType",
        "h/c0: [keys/a.pub]\n": "expected a public key file .* got list",
        "h/c0: keys\n": "public key file .*keys' is not a file",
        "h/c0: keys/text.pub\n": "text.pub' is not an OpenSSH public key",
        "h/c0: keys/binary.pub\n": "binary.pub' is not an OpenSSH public key",
        "h/c0: keys/empty.pub\n": "empty.pub' is not an OpenSSH public key",
        "h/c0: ssh-rsa AAAA\n": "'h/c0': the key is not an OpenSSH public key",
    }
    for text, expected in cases.items():
        reg.write_text(text)
        with pytest.raises(ConfigError, match=expected) as err:
            load_registry(reg)
        assert str(err.value).startswith(where) and "\n" not in str(err.value)
        assert secret not in str(err.value)  # a key file's content is not echoed
    with pytest.raises(ConfigError, match="does not exist"):
        load_registry(tmp_path / "missing.yaml")
    reg.write_text("h/c0: keys/a.pub\n")
    assert load_registry(reg) == {"h/c0": k["a"][1].read_text().strip()}
