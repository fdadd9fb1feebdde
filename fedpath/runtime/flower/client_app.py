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
                              resumed run restores it (:mod:`.node_state`)
``worker``                    socket of the node's persistent worker
                              (:mod:`fedpath.deploy.worker`; set by ``fedpath flower
                              supernode``): the stage runs there instead of in this
                              fresh process
============================  ==================================================

Any failure (a config it cannot parse, a missing data folder, other classes than
the federation's, a payload that does not fit the model) becomes an error reply
whose reason names the client and the node, so it reaches the coordinator's log.
What leaves the node is a fedpath error's one line (it names the file and the
problem, never the file's content); any other exception leaves as its type only,
its text and traceback stay in the node's log
(:func:`~.node_context.public_reason`).
Reading the node and run config and the error reply are :mod:`.node_context`;
finding the node's client in its data, :mod:`.node_data`.

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

import logging
from pathlib import Path

from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.clientapp.mod import LocalDpMod
from flwr.clientapp.typing import ClientAppCallable

from fedpath.config import ConfigError, ExperimentConfig
from fedpath.runtime.divergence import local_loss_diverged
from fedpath.runtime.flower import (
    EVALUATE_STAGE,
    META,
    NC_DP_CLIP,
    NC_DP_DELTA,
    NC_DP_EPSILON,
    NC_DP_SENSITIVITY,
    NC_STATE_DIR,
    NC_WORKER,
    PROTOCOL,
    RC_CONFIG,
    STATE_PREFIX,
    VALIDATE_STAGE,
)
from fedpath.runtime.flower.identity import NC_IDENTITY_KEY, sign_hello
from fedpath.runtime.flower.node_context import (
    NodeError,
    error_reply,
    experiment_from_run_config,
    node_client_id,
    node_experiment,
)
from fedpath.runtime.flower.node_data import find_client, node_dataset, node_run_context
from fedpath.runtime.flower.records import (
    clear_records,
    header_int,
    header_str,
    header_strs,
    payload_to_records,
    records_to_payload,
    unpack_records,
)
from fedpath.runtime.flower.worker_protocol import call
from fedpath.runtime.guard import (
    check_reply,
    check_run,
    check_secure_aggregation,
    check_stage,
    non_private_upload,
)
from fedpath.runtime.rules import node_policy
from fedpath.runtime.secagg import RC_MODE as RC_SECAGG_MODE
from fedpath.types import ClientState, Payload
from fedpath.version import __version__

log = logging.getLogger("fedpath")


def handle_stage(msg: Message, context: Context) -> RecordDict:
    """Run the client half of the algorithm on one stage message; the reply records.

    With node config ``worker`` (a socket path) the node's persistent worker runs
    it (:mod:`fedpath.deploy.worker`); otherwise this process does.
    """
    socket = context.node_config.get(NC_WORKER)
    if socket:
        return call(Path(str(socket)), msg.content, context)
    return handle_content(msg.content, context)


def handle_content(content: RecordDict, context: Context) -> RecordDict:
    """The client half of the algorithm on one stage message's content."""
    import torch

    from fedpath.data.base import DataError

    cid = node_client_id(context)
    meta = stage_header(content, context, cid)
    stage, rnd = header_str(meta, "stage"), header_int(meta, "round")
    seed, target = header_int(meta, "seed"), header_str(meta, "target")
    sources = header_strs(meta, "sources")
    cfg = node_experiment(context)
    policy = node_policy(context.node_config)  # the hospital's rules, every message
    check_run(policy, cfg)
    check_stage(policy, cfg, stage)
    raw = non_private_upload(cfg.algorithm.name)
    if raw is not None:
        log.warning(
            "client %s serves non-private %s (%s): opted in by the node policy",
            cid,
            cfg.algorithm.name,
            raw,
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
    prefix = state_prefix(target, seed)
    state = restore_state(context, cfg, cid, target, seed, rnd)
    payload: Payload = records_to_payload(content)
    if stage == EVALUATE_STAGE:  # only metrics leave the node, never predictions
        reply = Payload({}, half.evaluate(payload, state))
    elif stage == VALIDATE_STAGE:  # metrics; predictions only if the policy says so
        from fedpath.runtime.selection import validation_reply

        task = node_run_context(cfg, dataset).task
        share = policy.share_validation_predictions
        reply = validation_reply(task, seed, client.validation, payload, share)
    else:
        try:
            reply = half.handle(stage, payload, state)
        except FloatingPointError as err:  # the local loop's non-finite loss
            raise local_loss_diverged(cfg.train, rnd, cid, err) from None
    check_reply(policy, cfg, stage, reply, getattr(dataset, "image_size", None))
    clear_records(context.state, prefix)
    payload_to_records(state, context.state, prefix)
    state_dir = context.node_config.get(NC_STATE_DIR)
    scoring = stage in (EVALUATE_STAGE, VALIDATE_STAGE)
    if state_dir and not scoring:  # scoring leaves the state as is
        from fedpath.runtime.flower.node_state import save_state

        save_state(Path(str(state_dir)), cfg, cid, target, seed, rnd, state)
    # packed (fewer Flower objects), except for LocalDpMod, which works per array
    content = payload_to_records(reply, pack=NC_DP_CLIP not in context.node_config)
    content[META] = ConfigRecord({"client": cid, "stage": stage, "round": rnd})
    return content


def stage_header(content: RecordDict, context: Context, cid: str) -> ConfigRecord:
    """The message's header, if it speaks this node's protocol and is for ``cid``."""
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
    return meta


def state_prefix(target: str, seed: int) -> str:
    """Where a fold and seed keep the client state in ``context.state``."""
    return f"{STATE_PREFIX}/{target}/{seed}/"


def restore_state(
    context: Context,
    cfg: ExperimentConfig,
    cid: str,
    target: str,
    seed: int,
    rnd: int,
) -> ClientState:
    """The client's state from ``context.state``; in a new Flower run resuming at
    round ``rnd > 1``, from the node's disk (node config ``state-dir``) if it
    kept it there."""
    prefix = state_prefix(target, seed)
    state = records_to_payload(context.state, ClientState, prefix)
    state_dir = context.node_config.get(NC_STATE_DIR)
    if state_dir:
        from fedpath.runtime.flower.node_state import load_state

        fresh = not any(k.startswith(prefix) for k in context.state)
        if fresh and rnd > 1:  # a new Flower run resuming at round rnd
            state = (
                load_state(Path(str(state_dir)), cfg, cid, target, seed, rnd - 1)
                or state
            )
    return state


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


def _errors_stay_on_node(
    msg: Message, context: Context, call_next: ClientAppCallable
) -> Message:
    # outermost mod: an exception that escapes a handler or a mod would reach
    # the coordinator as Flower's own reason (the exception's full text, which
    # may quote data); here it becomes error_reply's public reason
    try:
        return call_next(msg, context)
    except Exception as err:
        return error_reply(msg, context, err)


app = ClientApp(mods=[_errors_stay_on_node])


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
