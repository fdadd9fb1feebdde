"""The ClientApp: one SuperNode serves one fedpath client (a hospital or a part of one).

For every stage message it builds the same :class:`~fedpath.algorithms.base.
ClientContext` as :meth:`InProcessRun._call_client
<fedpath.runtime.inprocess.InProcessRun._call_client>` and calls
``spec.client(params, ctx).handle(stage, payload, state)``; the reply payload goes
back as records, the :class:`~fedpath.types.ClientState` stays in the node's
``context.state`` (one prefix per fold and seed). The experiment config comes from
the run config (the coordinator's resolved YAML); the node config says which client
this node is and where its data lives, so each hospital points at its own disk:

============================  ==================================================
node-config key               meaning
============================  ==================================================
``client-id`` (required)      the fedpath client id, e.g. ``hospital_0/c0``
``data-name``                 dataset name (default: the run's ``data.name``)
``data-root``                 local data folder (default: the run's ``data.root``)
``data-params``               YAML mapping of dataset params (default: the run's)
``device``, ``threads``       ``runtime.device`` / ``runtime.threads`` on this node
                              (``runtime.feature_cache`` is always the node's own:
                              ``<state-dir>/feature_cache`` or ``~/.cache/fedpath``)
``dp-clipping-norm`` ...      local DP with Flower's ``LocalDpMod`` (see below)
``state-dir``                 keep the client state on the node's disk too, so a
                              resumed run restores it (:mod:`fedpath.deploy.node_state`)
``worker``                    socket of the node's persistent worker
                              (:mod:`fedpath.deploy.worker`; set by ``fedpath flower
                              supernode``): the stage runs there instead of in this
                              fresh process
============================  ==================================================

Any failure (a config it cannot parse, a missing data folder, other classes than
the federation's, a payload that does not fit the model) becomes an error reply
whose reason names the client and the node, so it reaches the coordinator's log.

Local differential privacy: with ``dp-clipping-norm``, ``dp-sensitivity``,
``dp-epsilon`` and ``dp-delta`` in the node config, the ``fit`` replies pass
through Flower's ``LocalDpMod`` (clip the update, add Gaussian noise). That mod
handles messages with exactly one ArrayRecord whose keys match the reply's, i.e.
weight-averaging algorithms without private entries (FedAvg, FedProx); other
stages and algorithms get an error reply naming the reason.

Client-level DP (``algorithm.name: dp_fedavg``): the ``fit`` replies pass
through Flower's ``fixedclipping_mod``
(:func:`~fedpath.runtime.flower.central_dp.node_clipping_mod`), which clips the
update to the run's ``clip`` after the client half, on the node; the node
policy's ``max_dp_clip`` caps that clip.

Secure aggregation: messages of the coordinator's SecAgg+ workflow (run config
``secure-aggregation = "secaggplus"``) pass through Flower's ``secaggplus_mod``
(:func:`~fedpath.runtime.flower.secagg.secure_aggregation_mod`), so the ``fit``
reply leaves the node masked; a node whose policy has
``require_secure_aggregation`` refuses every other stage but the evaluation.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from flwr.app import ConfigRecord, Context, Error, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.clientapp.mod import LocalDpMod
from flwr.clientapp.typing import ClientAppCallable
from flwr.common.constant import ErrorCode

from fedpath import __version__
from fedpath.config import ConfigError, ExperimentConfig, build_config
from fedpath.deploy.identity import NC_IDENTITY_KEY
from fedpath.deploy.policy import (
    NON_PRIVATE,
    UPLOADS,
    check_reply,
    check_run,
    check_secure_aggregation,
    check_stage,
    node_policy,
)
from fedpath.runtime.flower import (
    EVALUATE_STAGE,
    META,
    NC_CLIENT,
    NC_DATA_NAME,
    NC_DATA_PARAMS,
    NC_DATA_ROOT,
    NC_DEVICE,
    NC_DP_CLIP,
    NC_DP_DELTA,
    NC_DP_EPSILON,
    NC_DP_SENSITIVITY,
    NC_STATE_DIR,
    NC_THREADS,
    NC_WORKER,
    PROTOCOL,
    RC_CONFIG,
    STATE_PREFIX,
    VALIDATE_STAGE,
)
from fedpath.runtime.flower.records import (
    clear_records,
    header_int,
    header_str,
    header_strs,
    payload_to_records,
    records_to_payload,
    unpack_records,
)
from fedpath.runtime.secagg import RC_MODE as RC_SECAGG_MODE
from fedpath.types import ClientState, Payload

if TYPE_CHECKING:  # torch and the algorithms load only for stage messages
    from fedpath.data.base import DomainDataset
    from fedpath.data.partition import ClientData
    from fedpath.runtime.context import RunContext

log = logging.getLogger("fedpath")


class NodeError(RuntimeError):
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
        overrides["runtime.threads"] = int(nc[NC_THREADS])
    # where this node caches its encoded images (train.cache_features) is the
    # node's choice, never the coordinator's
    overrides["runtime.feature_cache"] = str(node_feature_cache(nc))
    try:
        return cfg.replace(**overrides) if overrides else cfg
    except ConfigError as err:
        raise ConfigError(f"node config: {err}") from None


def node_feature_cache(nc: Mapping[str, Any]) -> Path:
    """``<state-dir>/feature_cache``, or the user's cache folder
    (``$XDG_CACHE_HOME`` or ``~/.cache``, then ``fedpath/features``)."""
    if NC_STATE_DIR in nc:
        return Path(str(nc[NC_STATE_DIR])) / "feature_cache"
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "fedpath" / "features"


def find_client(
    dataset: DomainDataset,
    sources: list[str],
    cfg: ExperimentConfig,
    seed: int,
    client_id: str,
) -> ClientData:
    """This node's client, split exactly as the in-process runtime splits it.

    With every source domain on disk, :func:`make_clients` runs as in-process. A
    node that holds only its own hospital's domain gets the same split when
    ``partition.clients_per_domain`` is 1 (the whole training split); with more
    clients per domain the split depends on the domain's position among the
    sources, which needs every source's metadata on the node.
    """
    from fedpath.data.partition import make_clients

    present = [d for d in sources if d in dataset.domains]
    if not present:
        raise NodeError(
            f"client {client_id}: the node's dataset {dataset.name!r} holds domains "
            f"{dataset.domains}, none of the federation's sources {sources}"
        )
    if len(present) < len(sources) and cfg.partition.clients_per_domain > 1:
        raise NodeError(
            f"client {client_id}: the node's dataset holds {present} of the sources "
            f"{sources}; with partition.clients_per_domain="
            f"{cfg.partition.clients_per_domain} the Dirichlet split needs every "
            "source domain's labels on the node (or use clients_per_domain=1)"
        )
    for client in make_clients(dataset, present, cfg.partition, seed):
        if client.client_id == client_id:
            return client
    raise NodeError(
        f"client {client_id}: not a client of this fold; the node's data gives "
        f"{[c.client_id for c in make_clients(dataset, present, cfg.partition, seed)]}"
    )


#: Datasets this process has built, by data config (a worker keeps them across
#: messages; a fresh ClientApp process builds its one dataset once).
_DATASETS: dict[str, DomainDataset] = {}
_DATASETS_KEPT = 2


def node_dataset(cfg: ExperimentConfig) -> DomainDataset:
    """The node's dataset, built once per process and data config."""
    from fedpath.runtime.experiment import load_dataset
    from fedpath.tasks import prepare_dataset

    key = repr(cfg.data)
    if key not in _DATASETS:
        while len(_DATASETS) >= _DATASETS_KEPT:
            del _DATASETS[next(iter(_DATASETS))]
        _DATASETS[key] = load_dataset(cfg.data)
    # train.cache_features: the node encodes its own images (cached on its disk)
    return prepare_dataset(cfg, _DATASETS[key])


#: The run contexts (task, typed algorithm params) this process has built, by
#: config hash: algorithm params are resolved once per config, not per message.
_RUNS: dict[str, RunContext] = {}


def node_run_context(cfg: ExperimentConfig, dataset: DomainDataset) -> RunContext:
    """The run context of ``cfg`` on this node, built once per process and config."""
    from fedpath.runtime.context import RunContext

    key = cfg.hash()
    if key not in _RUNS:
        while len(_RUNS) >= _DATASETS_KEPT:
            del _RUNS[next(iter(_RUNS))]
        _RUNS[key] = RunContext.build(cfg, dataset)
    return _RUNS[key]


def handle_stage(msg: Message, context: Context) -> RecordDict:
    """Run the client half of the algorithm on one stage message; the reply records.

    With node config ``worker`` (a socket path) the node's persistent worker runs
    it (:mod:`fedpath.deploy.worker`); otherwise this process does.
    """
    socket = context.node_config.get(NC_WORKER)
    if socket:
        from fedpath.deploy.worker_protocol import call

        return call(Path(str(socket)), msg.content, context)
    return handle_content(msg.content, context)


def handle_content(content: RecordDict, context: Context) -> RecordDict:
    """The client half of the algorithm on one stage message's content."""
    import torch

    from fedpath.data.base import DataError

    cid = node_client_id(context)
    meta = content.config_records.get(META)
    if meta is None:
        raise NodeError(f"client {cid}: message without the {META!r} header")
    protocol = header_int(meta, "protocol")
    if protocol != PROTOCOL:
        raise NodeError(
            f"client {cid}: coordinator speaks protocol {protocol}, this node "
            f"{PROTOCOL} (fedpath {__version__}); install the same fedpath version"
        )
    addressed = header_str(meta, "client")
    if addressed != cid:
        raise NodeError(
            f"node {context.node_id} serves client {cid}, but the message is for "
            f"{addressed}"
        )
    stage, rnd = header_str(meta, "stage"), header_int(meta, "round")
    seed, target = header_int(meta, "seed"), header_str(meta, "target")
    sources = header_strs(meta, "sources")
    cfg = node_experiment(context)
    policy = node_policy(context.node_config)  # the hospital's rules, every message
    check_run(policy, cfg)
    check_stage(policy, cfg, stage)
    if cfg.algorithm.name in NON_PRIVATE:
        log.warning(
            "client %s serves non-private %s (%s): opted in by the node policy",
            cid,
            cfg.algorithm.name,
            UPLOADS[cfg.algorithm.name],
        )
    if cfg.runtime.threads:
        torch.set_num_threads(cfg.runtime.threads)
    dataset = node_dataset(cfg)
    classes = header_strs(meta, "classes")
    if list(dataset.classes) != classes:
        raise DataError(
            f"client {cid}: the node's dataset has classes {dataset.classes}, the "
            f"federation's are {classes} (same names, same order)"
        )
    client = find_client(dataset, sources, cfg, seed, cid)
    half = node_run_context(cfg, dataset).client_half(client, round=rnd, seed=seed)
    prefix = f"{STATE_PREFIX}/{target}/{seed}/"
    state = records_to_payload(context.state, ClientState, prefix)
    state_dir = context.node_config.get(NC_STATE_DIR)
    if state_dir:
        from fedpath.deploy.node_state import load_state, save_state

        fresh = not any(k.startswith(prefix) for k in context.state)
        if fresh and rnd > 1:  # a new Flower run resuming at round rnd
            state = (
                load_state(Path(str(state_dir)), cfg, cid, target, seed, rnd - 1)
                or state
            )
    payload: Payload = records_to_payload(content)
    if stage == EVALUATE_STAGE:  # only metrics leave the node, never predictions
        reply = Payload({}, half.evaluate(payload, state))
    elif stage == VALIDATE_STAGE:  # metrics; predictions only if the policy says so
        from fedpath.runtime.selection import validation_reply

        task = node_run_context(cfg, dataset).task
        share = policy.share_validation_predictions
        reply = validation_reply(task, seed, client.validation, payload, share)
    else:
        reply = half.handle(stage, payload, state)
    check_reply(policy, cfg, stage, reply, getattr(dataset, "image_size", None))
    clear_records(context.state, prefix)
    payload_to_records(state, context.state, prefix)
    scoring = stage in (EVALUATE_STAGE, VALIDATE_STAGE)
    if state_dir and not scoring:  # scoring leaves the state as is
        save_state(Path(str(state_dir)), cfg, cid, target, seed, rnd, state)
    # packed (fewer Flower objects), except for LocalDpMod, which works per array
    content = payload_to_records(reply, pack=NC_DP_CLIP not in context.node_config)
    content[META] = ConfigRecord({"client": cid, "stage": stage, "round": rnd})
    return content


def error_reply(msg: Message, context: Context, err: Exception) -> Message:
    """An error reply whose reason names the client and the node."""
    cid = context.node_config.get(NC_CLIENT, "?")
    # a worker's error already reads "ExceptionType: message"
    remote = type(err).__name__ == "WorkerError"
    what = str(err) if remote else f"{type(err).__name__}: {err}"
    reason = f"client {cid} (node {context.node_id}): {what}"
    log.error("%s", reason, exc_info=err)
    return Message(
        Error(code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION, reason=reason),
        reply_to=msg,
    )


def local_dp_mod(
    msg: Message, context: Context, call_next: ClientAppCallable
) -> Message:
    """Flower's ``LocalDpMod`` on ``fit`` replies, if the node config asks for it."""
    nc = context.node_config
    if NC_DP_CLIP not in nc:
        return call_next(msg, context)
    meta = msg.content.config_records.get(META)
    if meta is None or meta.get("stage") != "fit":
        return call_next(msg, context)
    try:
        mod = LocalDpMod(
            clipping_norm=float(nc[NC_DP_CLIP]),
            sensitivity=float(nc.get(NC_DP_SENSITIVITY, nc[NC_DP_CLIP])),
            epsilon=float(nc[NC_DP_EPSILON]),
            delta=float(nc[NC_DP_DELTA]),
        )
    except (KeyError, ValueError) as err:
        return error_reply(
            msg,
            context,
            ConfigError(
                f"node config: local DP needs {NC_DP_CLIP}, {NC_DP_EPSILON} and "
                f"{NC_DP_DELTA} (and optionally {NC_DP_SENSITIVITY}): {err}"
            ),
        )
    unpack_records(msg.content)  # the mod subtracts the received arrays by name
    reply = mod(msg, context, call_next)
    if reply.has_error() and "(node " not in (reply.error.reason or ""):
        return error_reply(msg, context, NodeError(f"LocalDpMod: {reply.error.reason}"))
    return reply


app = ClientApp()


@app.query("hello")
def hello(msg: Message, context: Context) -> Message:
    """Tell the coordinator which client this node serves."""
    try:
        cid = node_client_id(context)
        # refuse at once a run this node's policy would refuse at every stage
        # (the run's own config: the node's data options do not change it)
        if context.run_config.get(RC_CONFIG):
            run = experiment_from_run_config(context.run_config)
            policy = node_policy(context.node_config)
            check_run(policy, run)
            mode = str(context.run_config.get(RC_SECAGG_MODE) or "none")
            check_secure_aggregation(policy, run, mode)
    except Exception as err:
        return error_reply(msg, context, err)
    record = ConfigRecord({"client": cid, "protocol": PROTOCOL, "fedpath": __version__})
    nonce = msg.content.config_records.get(META, ConfigRecord()).get("challenge")
    key = context.node_config.get(NC_IDENTITY_KEY)
    if nonce and key:  # prove this node holds the key registered for cid
        from fedpath.deploy.identity import sign_hello

        try:
            record["signature"] = sign_hello(Path(str(key)), str(nonce), cid)
        except Exception as err:
            return error_reply(msg, context, err)
    return Message(RecordDict({META: record}), reply_to=msg)


def _secure_aggregation_mod(
    msg: Message, context: Context, call_next: ClientAppCallable
) -> Message:
    # imported at the first stage message: the hello needs none of it
    from fedpath.runtime.flower.secagg import secure_aggregation_mod

    return secure_aggregation_mod(msg, context, call_next)


def _node_clipping_mod(
    msg: Message, context: Context, call_next: ClientAppCallable
) -> Message:
    from fedpath.runtime.flower.central_dp import node_clipping_mod

    return node_clipping_mod(msg, context, call_next)


# SecAgg+ outermost: it masks the reply LocalDpMod has noised; dp_fedavg's clip
# (Flower's fixedclipping_mod) innermost, so a node's local noise is not clipped
@app.train(mods=[_secure_aggregation_mod, local_dp_mod, _node_clipping_mod])
def train(msg: Message, context: Context) -> Message:
    """Answer one stage of a round (every stage arrives as a ``train`` message)."""
    try:
        return Message(handle_stage(msg, context), reply_to=msg)
    except Exception as err:
        return error_reply(msg, context, err)
