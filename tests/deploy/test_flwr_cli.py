"""The Flower app folder, the flwr CLI's connections and run-config files."""

from __future__ import annotations

import tomllib
from pathlib import Path

from fedpath.deploy.flwr_cli import (
    APP_PYPROJECT,
    run_config_file,
    write_app,
    write_connection,
)


def test_flower_app_folder_matches_the_template() -> None:
    shipped = Path(__file__).resolve().parents[2] / "flower_app" / "pyproject.toml"
    assert shipped.read_text() == APP_PYPROJECT


def test_the_app_points_at_the_adapters_apps(tmp_path: Path) -> None:
    folder = write_app(tmp_path / "app")
    app = tomllib.loads((folder / "pyproject.toml").read_text())["tool"]["flwr"]["app"]
    assert app["components"] == {
        "serverapp": "fedpath.runtime.flower.server_app:app",
        "clientapp": "fedpath.runtime.flower.client_app:app",
    }
    assert app["config"]["fedpath-config"] == ""  # filled in by `fedpath flower run`


def test_connections_add_up_and_the_first_is_the_default(tmp_path: Path) -> None:
    path = write_connection(tmp_path, "local", "127.0.0.1:9093")
    cert = tmp_path / "ca.crt"
    write_connection(tmp_path, "tls", "10.0.0.1:9093", root_cert=cert, default=False)
    links = tomllib.loads(path.read_text())["superlink"]
    assert links["default"] == "local"
    assert links["local"] == {"address": "127.0.0.1:9093", "insecure": True}
    assert links["tls"] == {"address": "10.0.0.1:9093", "root-certificates": str(cert)}
    write_connection(tmp_path, "tls", "10.0.0.1:9093", root_cert=cert)
    assert tomllib.loads(path.read_text())["superlink"]["default"] == "tls"


def test_run_config_files_are_toml_and_never_overwritten(tmp_path: Path) -> None:
    values = {"fedpath-config": "name: x\n", "resume": True, "reply-timeout": 5.0}
    a = run_config_file(values, tmp_path / "rc")
    b = run_config_file(values, tmp_path / "rc")
    assert a != b and a.suffix == ".toml"
    assert tomllib.loads(a.read_text()) == values
