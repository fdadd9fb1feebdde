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
from tests.runtime.test_flower_loopback import (  # noqa: F401  (fixture)
    assert_same_run,
    config,
    in_process,
    records,
    run_over_grid,
    task_identity,
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
def test_duplicate_claims_without_a_registry_are_refused(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    nodes = {
        100: _node("hospital_0/c0", None),
        101: _node("hospital_1/c0", None),
        102: _node("hospital_1/c0", None),
    }
    cfg = config(tmp_path / "flower")
    run_over_grid(cfg, nodes)
    log = [r.getMessage() for r in caplog.records]
    assert any("client ids are self-declared" in m for m in log)
    assert any(
        "nodes [101, 102] all claim client hospital_1/c0; none" in m for m in log
    )
    assert any("hospital_1/c0" in str(r["client"]) for r in records(cfg, "failure"))
