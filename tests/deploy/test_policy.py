"""Loading a hospital's policy file (``fedpath flower supernode --policy FILE``):
the keys are checked at load, naming the file and the key, and the policy
travels to the node in its node config."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedpath.config import ConfigError
from fedpath.deploy.policy import load_policy
from fedpath.runtime.rules import NC_POLICY, NodePolicy, node_policy


def test_policy_file_and_flags(tmp_path: Path) -> None:
    f = tmp_path / "policy.yaml"
    f.write_text("algorithms: [fedavg, fedstain]\nmax_rounds: 5\n")
    p = load_policy(f, ["central_simclr"])
    assert p.algorithms == ("fedavg", "fedstain") and p.max_rounds == 5
    assert p.allow_non_private == ("central_simclr",)
    assert "NON-PRIVATE algorithms opted in: central_simclr uploads" in p.summary()
    # travels in the node config as one line, read back identically
    assert "\n" not in p.to_yaml() and node_policy({NC_POLICY: p.to_yaml()}) == p
    assert node_policy({}) == NodePolicy()
    for text, expected in [
        ("max_upload_ratio: 2", "'max_upload_ratio': expected a number in [0, 1]"),
        ("algorithm: [fedavg]", "unknown config key 'algorithm'"),
        ("algorithms: [fedavgg]", "unknown algorithm(s) ['fedavgg']"),
        ("[1, 2]", "expected a mapping of policy keys"),
    ]:
        f.write_text(text)
        with pytest.raises(ConfigError, match=r"policy\.yaml'?: .*" + _re(expected)):
            load_policy(f)
    with pytest.raises(ConfigError, match="does not exist"):
        load_policy(tmp_path / "nope.yaml")


def _re(text: str) -> str:
    import re

    return re.escape(text)


def test_supernode_cli_puts_the_policy_in_the_node_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("flwr")
    from fedpath.cli import main

    f = tmp_path / "policy.yaml"
    f.write_text("algorithms: [fedavg, fedstain]\nmax_rounds: 20\n")
    base = ["flower", "supernode", "--superlink", "10.0.0.1:9092", "--insecure"]
    base += ["--client-id", "hospital_0/c0", "--dry-run", "--no-worker"]
    assert main([*base, "--policy", str(f), "--allow-non-private", "pooled_mil"]) == 0
    out, err = capsys.readouterr()
    assert "NON-PRIVATE algorithms opted in: pooled_mil uploads every real" in err
    line = next(tok for tok in out.split(" policy=") if tok.startswith('"{'))
    text = line.split('"')[1]
    assert node_policy({NC_POLICY: text}) == NodePolicy(
        algorithms=("fedavg", "fedstain"),
        allow_non_private=("pooled_mil",),
        max_rounds=20,
    )
    f.write_text("max_upload_ratio: 3\n")
    assert main([*base, "--policy", str(f)]) == 2
    assert "'max_upload_ratio': expected a number in [0, 1]" in capsys.readouterr().err


def test_a_policy_key_of_the_wrong_type_is_named_with_the_flags(
    tmp_path: Path,
) -> None:
    f = tmp_path / "policy.yaml"
    # a string, not a list: its letters were read as algorithm names
    f.write_text("allow_non_private: central_supervised\n")
    with pytest.raises(ConfigError, match="'allow_non_private': expected a list"):
        load_policy(f, ["pooled_mil"])
    for text, expected in [
        ("max_rounds: ten", "'max_rounds': expected an integer"),
        ("require_dp: 1", "'require_dp': expected true or false"),
        ("algorithms: fedavg", "'algorithms': expected a list"),
    ]:
        f.write_text(text)
        with pytest.raises(ConfigError, match=_re(expected)):
            load_policy(f)


def test_a_policy_that_is_not_yaml_names_the_place_not_the_content(
    tmp_path: Path,
) -> None:
    f = tmp_path / "policy.yaml"
    f.write_text("root:x:0:0:root:/root:/bin/bash\nsecret: [1\n")
    with pytest.raises(ConfigError, match=r"not valid YAML: .*\(line \d+, col") as e:
        load_policy(f)
    assert "secret" not in str(e.value) and "\n" not in str(e.value)
