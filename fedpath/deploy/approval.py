"""Code approval at a hospital's node: it runs only the apps its hospital approved.

A Flower app (FAB) is identified by its digest, the SHA-256 of the FAB's bytes
(Flower's own ``fab_hash``; ``flwr run`` builds the FAB reproducibly, so the same
app folder gives the same digest on every machine with the same Flower). The
node keeps the digests it may run in ``approved_apps.yaml`` (a mapping
``digest: note``), written by ``fedpath flower approve``.

Why not Flower's own mechanism: ``flower-supernode --trusted-entities`` in 1.42
accepts only FABs that carry ``valid_license`` (set only for FABs fetched from
Flower's platform) and a signature by a listed key, so it refuses every FAB a
consortium's own coordinator uploads. :func:`install_approval` therefore hooks
the same place in Flower 1.42's ``start_client_internal``: when a message of an
unknown run arrives the SuperNode fetches its FAB and, before storing it (only
a stored FAB ever reaches a ClientApp process), asks ``_verify_fab``. fedpath
makes that check run for every FAB and answer from the approved list; a refused
FAB gets Flower's ``FAB_VERIFICATION_ERROR`` reply (the coordinator sees the
message fail) and none of its code is imported on the node. The hook applies to
the Flower series fedpath pins (1.42) only; on another the node refuses to start.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import re
import tempfile
import warnings
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from fedpath.schema import ConfigError

log = logging.getLogger("fedpath")

#: the approved list's file name (in the node's Flower home unless named)
APPROVED_FILE = "approved_apps.yaml"
#: the Flower series whose ``start_client_internal`` the hook was written for
FLOWER_SERIES = "1.42."
#: what Flower's check reads so that it goes on to ``_verify_fab`` (see module doc)
_LICENSE_KEY = "valid_license"
_DIGEST = re.compile(r"[0-9a-f]{64}")
_PATHSPEC_DEPRECATION = r"GitWildMatchPattern"
_HEADER = (
    "# Apps this fedpath node runs: SHA-256 of the Flower app (FAB) -> note.\n"
    "# Add one with `fedpath flower approve`; remove a line to withdraw it.\n"
)


def default_path(home: Path) -> Path:
    """The node's approved list in its Flower home ``home`` (``$FLWR_HOME``)."""
    return home / APPROVED_FILE  # not in a folder named fedpath: from the
    # working directory it would shadow the package


def fab_digest(content: bytes) -> str:
    """The digest of a FAB's bytes, as Flower computes its ``fab_hash``."""
    return hashlib.sha256(content).hexdigest()


def build_app(folder: Path) -> bytes:
    """The FAB's bytes ``flwr run`` builds from the app folder ``folder``."""
    from flwr.cli.build import build_fab_from_disk

    with warnings.catch_warnings():
        # Flower 1.42 asks pathspec >= 1 for its deprecated 'gitwildmatch'
        # patterns: one DeprecationWarning per pattern per build, not the node's
        warnings.filterwarnings("ignore", _PATHSPEC_DEPRECATION, DeprecationWarning)
        return build_fab_from_disk(folder)


def app_dir_digest(folder: Path) -> str:
    """The digest of the FAB ``flwr run`` builds from the app folder ``folder``."""
    if not (folder / "pyproject.toml").is_file():
        raise ConfigError(
            f"--app-dir {str(folder)!r}: no pyproject.toml there; expected a Flower "
            "app folder (as `fedpath flower app DIR` writes)"
        )
    try:
        return fab_digest(build_app(folder))
    except ValueError as err:  # Flower's own reason: invalid app config, size...
        raise ConfigError(f"--app-dir {str(folder)!r}: {err}") from None


def shipped_app_digest() -> str:
    """The digest of fedpath's own app (what ``fedpath flower run`` uploads)."""
    from fedpath.deploy.flwr_cli import write_app

    with tempfile.TemporaryDirectory() as tmp:
        return app_dir_digest(write_app(Path(tmp) / "app"))


def fab_file_digest(path: Path) -> str:
    """The digest of a ``.fab`` file (handed over by the coordinator)."""
    if not path.is_file():
        raise ConfigError(f"app {str(path)!r} does not exist; expected a .fab file")
    try:
        content = path.read_bytes()
    except OSError as err:
        raise ConfigError(f"app {str(path)!r} cannot be read: {err.strerror}") from None
    if not content.startswith(b"PK"):
        raise ConfigError(
            f"app {str(path)!r} is not a FAB (a zip archive); expected the .fab file "
            "that `flwr build` writes"
        )
    return fab_digest(content)


def load_approved(path: Path) -> dict[str, str]:
    """The approved digests of ``path`` (``{}`` if it does not exist yet)."""
    from fedpath.utils.yaml_io import read_yaml_mapping

    if not path.exists():
        return {}
    raw = read_yaml_mapping(path, "approved apps", "a mapping of digest: note")
    out: dict[str, str] = {}
    for key, note in raw.items():
        digest = str(key).lower()
        if not _DIGEST.fullmatch(digest):
            raise ConfigError(
                f"approved apps {str(path)!r}: key {str(key)[:70]!r} is not a "
                "SHA-256 digest (64 hex digits); write it with `fedpath flower approve`"
            )
        out[digest] = "" if note is None else str(note)
    return out


def approve(path: Path, digest: str, note: str) -> bool:
    """Add ``digest`` to the approved list ``path``; False if it was there."""
    from fedpath.utils.io import atomic_write_text

    approved = load_approved(path)
    if digest in approved:
        return False
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    approved[digest] = f"{note}; approved {stamp}"
    atomic_write_text(path, _HEADER + yaml.safe_dump(approved, sort_keys=False))
    return True


def is_approved(content: bytes, path: Path) -> bool:
    """Whether the FAB ``content`` is on the approved list ``path`` (read now, so
    an approval takes effect without a restart); logs the reason when not."""
    digest = fab_digest(content)
    try:
        approved = load_approved(path)
    except ConfigError as err:
        log.error("fedpath: app %s refused: %s", digest, err)
        return False
    if digest in approved:
        log.info("fedpath: app %s approved (%s)", digest, approved[digest])
        return True
    log.error(
        "fedpath: app %s refused: not in %s. To run it, approve the app it is: "
        "`fedpath flower approve --approved-apps %s` (fedpath's own app, built "
        "here), with --app-dir DIR, or with APP.fab (the coordinator's file)",
        digest,
        path,
        path,
    )
    return False


def install_approval(path: Path) -> None:
    """Make this process's SuperNode run only FABs approved in ``path``.

    Raises :class:`ConfigError` (the node does not start) on a Flower series the
    hook was not written for, rather than run unchecked code.
    """
    import flwr
    from flwr.supernode import start_client_internal as sci

    pull = getattr(sci, "_pull_and_store_message", None)
    if (
        not flwr.__version__.startswith(FLOWER_SERIES)
        or not callable(pull)
        or not callable(getattr(sci, "_verify_fab", None))
    ):
        raise ConfigError(
            f"app approval is written for Flower {FLOWER_SERIES}x, found "
            f"{flwr.__version__}: install 'flwr>=1.42,<1.43' (or start the node "
            "with --no-app-approval to run any app the coordinator sends)"
        )
    global _approved_path
    _approved_path = path  # installed before: the latest list wins
    if not getattr(pull, "_fedpath_gated", False):
        sci._pull_and_store_message = _gated_pull(pull)
        setattr(sci, "_verify_fab", _verify)  # noqa: B010  (Flower's name for it)


#: the approved list of this process's SuperNode (set by :func:`install_approval`)
_approved_path: Path | None = None


def _verify(fab: Any, trusted_entities: dict[str, str]) -> bool:
    """Flower's ``_verify_fab``, answered from the approved list."""
    return _approved_path is not None and is_approved(fab.content, _approved_path)


def _gated_pull(pull: Callable[..., Any]) -> Callable[..., Any]:
    """``_pull_and_store_message`` with Flower's FAB check always on: a non-empty
    ``trusted_entities`` and FABs marked so that the check reaches ``_verify_fab``."""

    @functools.wraps(pull)
    def gated(**kwargs: Any) -> Any:
        get_fab = kwargs["get_fab"]

        def marked(fab_hash: str, run_id: int) -> Any:
            fab = get_fab(fab_hash, run_id)
            fab.verifications = {**fab.verifications, _LICENSE_KEY: "fedpath"}
            return fab

        kwargs["get_fab"] = marked
        kwargs["trusted_entities"] = {"fedpath": "approved apps"}
        return pull(**kwargs)

    setattr(gated, "_fedpath_gated", True)  # noqa: B010  (installed once)
    return gated
