"""What a node reads from its Flower ``Context``, and how it answers a failure.

The run config carries the coordinator's resolved experiment config; the node
config says which client this node serves and where its data lives (the keys are
listed in :mod:`.client_app`). Every node-side piece (the ClientApp and its mods,
:mod:`.secagg` and :mod:`.central_dp`) reads them here and turns a failure into
an error reply with :func:`error_reply`, so this module sits below all of them
and imports none of them.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from flwr.app import Context, Error, Message
from flwr.common.constant import ErrorCode

from fedpath.config import ConfigError, ExperimentConfig, build_config
from fedpath.errors import FedpathError
from fedpath.runtime.flower import (
    NC_CLIENT,
    NC_DATA_NAME,
    NC_DATA_PARAMS,
    NC_DATA_ROOT,
    NC_DEVICE,
    NC_STATE_DIR,
    NC_THREADS,
    RC_CONFIG,
)

log = logging.getLogger("fedpath")


class NodeError(FedpathError, RuntimeError):
    """A node that cannot serve the message (its config, data or the header)."""


def experiment_from_run_config(run_config: Mapping[str, Any]) -> ExperimentConfig:
    """The experiment config the coordinator put in the run config (resolved YAML)."""
    text = run_config.get(RC_CONFIG, "")
    if not isinstance(text, str) or not text.strip():
        raise ConfigError(
            f"Flower run config key {RC_CONFIG!r} is empty: start runs with "
            "`fedpath flower run CONFIG.yaml`, which puts the experiment config there"
        )
    return _parse_experiment(text)


@functools.lru_cache(maxsize=4)
def _parse_experiment(text: str) -> ExperimentConfig:
    """Parse and validate a run's config once per process (configs are frozen)."""
    where = f"Flower run config key {RC_CONFIG!r}"
    return build_config(yaml_mapping(text, where, "a mapping", quote=False))


def yaml_mapping(text: str, where: str, expected: str, quote: bool) -> dict[str, Any]:
    """``text`` parsed as a YAML mapping; a ConfigError naming ``where`` if it is not.

    ``quote``: repeat ``text`` in the error (a short node option, not a whole
    experiment config).
    """
    shown = f" {text!r}" if quote else ""
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ConfigError(f"{where}: bad YAML{shown}: {err}") from None
    if not isinstance(raw, dict):
        got = f", got {text!r}" if quote else ""
        raise ConfigError(f"{where}: expected {expected}{got}")
    return raw


def node_client_id(context: Context) -> str:
    """The fedpath client this node serves (node config ``client-id``)."""
    cid = context.node_config.get(NC_CLIENT)
    if not isinstance(cid, str) or not cid:
        raise NodeError(
            f"node {context.node_id}: node config has no {NC_CLIENT!r}; start it with "
            f"--node-config '{NC_CLIENT}=\"hospital_0/c0\" ...'"
        )
    return cid


def node_experiment(context: Context) -> ExperimentConfig:
    """The run's config with this node's data location and device applied."""
    cfg = experiment_from_run_config(context.run_config)
    nc = context.node_config
    overrides: dict[str, Any] = {}
    if NC_DATA_NAME in nc and str(nc[NC_DATA_NAME]) != cfg.data.name:
        overrides["data.name"] = str(nc[NC_DATA_NAME])
        overrides["data.params"] = {}  # another dataset: its own defaults
    if NC_DATA_ROOT in nc:
        overrides["data.root"] = str(nc[NC_DATA_ROOT])
    if NC_DATA_PARAMS in nc:
        overrides["data.params"] = yaml_mapping(
            str(nc[NC_DATA_PARAMS]),
            f"node config {NC_DATA_PARAMS!r}",
            "a YAML mapping such as '{image_size: 128}'",
            quote=True,
        )
    if NC_DEVICE in nc:
        overrides["runtime.device"] = str(nc[NC_DEVICE])
    if NC_THREADS in nc:
        overrides["runtime.threads"] = _node_int(nc, NC_THREADS)
    # where this node caches its encoded images (train.cache_features) is the
    # node's choice, never the coordinator's
    overrides["runtime.feature_cache"] = str(node_feature_cache(nc))
    try:
        return cfg.replace(**overrides) if overrides else cfg
    except ConfigError as err:
        raise ConfigError(f"node config: {err}") from None


def _node_int(nc: Mapping[str, Any], key: str) -> int:
    """Node config ``key`` as a whole number >= 0 (a ConfigError naming it)."""
    value = nc[key]
    try:
        number = int(str(value))
    except ValueError:
        number = -1
    if isinstance(value, bool) or number < 0:
        raise ConfigError(
            f"node config {key!r}: expected a whole number >= 0, got {value!r}"
        )
    return number


def node_feature_cache(nc: Mapping[str, Any]) -> Path:
    """``<state-dir>/feature_cache``, or the user's cache folder
    (``$XDG_CACHE_HOME`` or ``~/.cache``, then ``fedpath/features``)."""
    if NC_STATE_DIR in nc:
        return Path(str(nc[NC_STATE_DIR])) / "feature_cache"
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "fedpath" / "features"


#: longest reason that leaves the node (a fedpath error is one short line)
MAX_REASON = 1000


def public_reason(err: BaseException) -> str:
    """What may leave the node about ``err``: a fedpath error's one line
    (``ExceptionType: message``), else only the type and a generic line.

    Never a traceback or local values: the detail goes to the node's own log.
    """
    from fedpath.runtime.flower.worker_protocol import WorkerError

    if isinstance(err, WorkerError):  # already a public reason, from the worker
        text = str(err)
    elif isinstance(err, FedpathError):
        # fedpath writes these messages itself (file, key or option and the
        # problem, never a file's content); any other exception's text may quote
        # data (a library's parse error shows the line it failed on)
        text = f"{type(err).__name__}: {err}"
    else:
        text = (
            f"{type(err).__name__} (not a fedpath error: its text stays on the "
            "node; the node's log has the details)"
        )
    text = " ".join(text.split())  # one line
    return text if len(text) <= MAX_REASON else text[: MAX_REASON - 3] + "..."


def error_reply(msg: Message, context: Context, err: Exception) -> Message:
    """An error reply whose reason names the client and the node, and the
    problem as :func:`public_reason` lets it leave the node."""
    cid = context.node_config.get(NC_CLIENT, "?")
    where = f"client {cid} (node {context.node_id})"
    log.error("%s: %s: %s", where, type(err).__name__, err, exc_info=err)
    reason = f"{where}: {public_reason(err)}"
    return Message(
        Error(code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION, reason=reason),
        reply_to=msg,
    )
