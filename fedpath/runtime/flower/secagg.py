"""SecAgg+ on the fit stage: Flower's ``SecAggPlusWorkflow`` and ``secaggplus_mod``.

Flower 1.42 ships the protocol as a legacy-Strategy workflow (the coordinator
side, which calls ``Strategy.configure_fit`` / ``aggregate_fit`` through a
``LegacyContext``) and a ClientApp mod (the node side, which wraps a handler
whose reply is a legacy ``FitRes``). fedpath drives both unchanged and adapts
only the two ends:

- coordinator (:mod:`.secagg_server`): the workflow gets a stand-in strategy
  that selects the round's nodes and keeps the unmasked aggregate, and a Grid
  that puts fedpath's own ``fit`` message (the
  broadcast, packed, with its header) in the ``collect_masked_vectors`` stage,
  a fedpath header on the other three stages, and pulls replies with fedpath's
  short poll; failures are logged and recorded as for any stage;
- node (:func:`secure_aggregation_mod`): messages carrying SecAgg+ configs go
  through ``secaggplus_mod``, whose inner handler runs the client half as usual
  and hands the mod the reply as a ``FitRes`` (the floating entries as float64,
  the example count as its weight); the mod masks them and empties every
  ArrayRecord of the reply, so no weight leaves the node in the clear. The
  plain copy of the count is zeroed: n_k travels only inside the masked sum.

Four messages per client and round instead of one: ``setup`` (public keys),
``share_keys`` (encrypted Shamir shares of the mask seeds), the fit stage
(``collect_masked_vectors``: the masked, quantized, weighted entries) and
``unmask`` (the shares that remove the masks, also those of clients that
dropped after sharing keys). The coordinator learns sum_k dq_k x_k and
sum_k dq_k, and, per client, only the plain scalars of the reply (losses).
Integer entries (BatchNorm's ``num_batches_tracked``) are not uploaded: the
global model keeps its value for them.
"""

from __future__ import annotations

import functools
from typing import cast

import numpy as np
from flwr.app import (
    Array,
    ArrayRecord,
    ConfigRecord,
    Context,
    Message,
    MetricRecord,
    RecordDict,
)
from flwr.client.mod import secaggplus_mod
from flwr.clientapp.typing import ClientAppCallable
from flwr.common.secure_aggregation.secaggplus_constants import (
    RECORD_KEY_CONFIGS,
    RECORD_KEY_STATE,
    Key,
    Stage,
)

from fedpath.algorithms.names import WEIGHTS
from fedpath.config import ConfigError
from fedpath.runtime.flower import META, PROTOCOL
from fedpath.runtime.flower.node_context import (
    error_reply,
    experiment_from_run_config,
    node_client_id,
)
from fedpath.runtime.flower.records import (
    RecordError,
    header_int,
    header_str,
    payload_to_records,
    records_to_payload,
)
from fedpath.runtime.secagg import (
    RC_CLIPPING,
    RC_MAX_WEIGHT,
    check_algorithm,
)
from fedpath.types import Payload

#: names, shapes and dtypes of the masked entries, in the order they are summed
INDEX = "secagg/index"
#: header stage of the three protocol stages around the fit stage
STAGE_PREFIX = "secaggplus."
FITRES_PARAMETERS = "fitres.parameters"
FITRES_COUNT = "fitres.num_examples"


# --------------------------------------------------------------------- node


class _Refused(Exception):
    """The client half's own error reply, passed through the mod unchanged."""

    def __init__(self, reply: Message) -> None:
        super().__init__(reply.error.reason)
        self.reply = reply


def secure_aggregation_mod(
    msg: Message, context: Context, call_next: ClientAppCallable
) -> Message:
    """SecAgg+ for messages that carry its configs; the policy's
    ``require_secure_aggregation`` for those that do not."""
    from fedpath.runtime.guard import check_run, plain_upload_refusal
    from fedpath.runtime.rules import node_policy

    configs = msg.content.config_records.get(RECORD_KEY_CONFIGS)
    meta = msg.content.config_records.get(META)
    if configs is None:
        stage = meta.get("stage") if meta is not None else None
        refusal: Exception | None
        try:
            refusal = plain_upload_refusal(node_policy(context.node_config), str(stage))
        except ConfigError as err:
            refusal = err
        if refusal is not None:
            return error_reply(msg, context, refusal)
        return call_next(msg, context)
    collect = configs.get(Key.STAGE) == Stage.COLLECT_MASKED_VECTORS
    try:
        cid = node_client_id(context)
        if meta is None:
            raise RecordError(f"client {cid}: SecAgg+ message without {META!r}")
        protocol, addressed = header_int(meta, "protocol"), header_str(meta, "client")
        if protocol != PROTOCOL:
            raise RecordError(
                f"client {cid}: coordinator speaks protocol {protocol}, this node "
                f"{PROTOCOL}; install the same fedpath version"
            )
        if addressed != cid:
            raise RecordError(
                f"node {context.node_id} serves client {cid}, but the SecAgg+ "
                f"message is for {addressed}"
            )
        cfg = experiment_from_run_config(context.run_config)
        check_run(node_policy(context.node_config), cfg)
        equal = check_algorithm(cfg) == "equal"
        inner = functools.partial(
            _masked_fit, call_next=call_next, cid=cid, equal=equal
        )
        reply = secaggplus_mod(msg, context, inner if collect else _no_handler)
    except _Refused as refused:
        return refused.reply
    except Exception as err:
        return error_reply(msg, context, err)
    if collect:  # n_k stays inside the masked vector (its first entry)
        reply.content.metric_records[FITRES_COUNT] = MetricRecord({"num_examples": 0})
    return reply


def _no_handler(msg: Message, context: Context) -> Message:
    raise RecordError("SecAgg+ setup, share_keys and unmask run no client code")


def _masked_fit(
    msg: Message,
    context: Context,
    call_next: ClientAppCallable,
    cid: str,
    equal: bool,
) -> Message:
    """Run the client half; its reply as the ``FitRes`` the mod masks."""
    del msg.content.config_records[RECORD_KEY_CONFIGS]  # the mod holds them
    out = call_next(msg, context)
    if out.has_error():
        raise _Refused(out)
    state = context.state.config_records[RECORD_KEY_STATE]
    content = fitres_content(
        records_to_payload(out.content),
        cid,
        clipping_range=float(cast(float, state["clipping_range"])),
        max_weight=float(cast(float, state["max_weight"])),
        equal=equal,
    )
    content[META] = out.content.config_records[META]
    return Message(content, reply_to=msg)


def fitres_content(
    reply: Payload,
    cid: str,
    clipping_range: float,
    max_weight: float,
    equal: bool = False,
) -> RecordDict:
    """The records ``secaggplus_mod`` reads as a ``FitRes``: every floating entry
    of the reply's weights (float64, so Flower's quantizer rounds nothing
    before it rounds stochastically), the weight (n_k, or 1 for an algorithm
    that averages with ``equal`` weights), the index of the entries and the
    reply's other scalars (sent in the clear)."""
    if set(reply.arrays) != {WEIGHTS}:
        raise RecordError(
            f"client {cid}: secure aggregation sums one group of weights, the "
            f"reply carries {sorted(reply.arrays)}"
        )
    entries = {k: v for k, v in reply.arrays[WEIGHTS].items() if v.dtype.kind == "f"}
    for name, value in entries.items():
        top = float(np.max(np.abs(value))) if value.size else 0.0
        if not np.isfinite(top) or top > clipping_range:
            raise ConfigError(
                f"client {cid}: entry {name!r} reaches |x| = {top:.4g}, outside "
                f"{RC_CLIPPING}={clipping_range:g}, and would be clipped; raise "
                f"{RC_CLIPPING} on the coordinator (the error bound grows with it)"
            )
    count = reply.scalars.get("num_examples", 1)
    weight = 1 if equal else count
    if isinstance(weight, bool) or not isinstance(weight, int | float) or weight <= 0:
        raise RecordError(f"client {cid}: reply without a positive num_examples")
    if weight > max_weight:
        raise ConfigError(
            f"client {cid}: {weight} examples, more than {RC_MAX_WEIGHT}="
            f"{max_weight:g}; the weighted sum could overflow; raise {RC_MAX_WEIGHT} "
            "on the coordinator"
        )
    out = RecordDict(
        {
            FITRES_PARAMETERS: ArrayRecord(
                {k: Array(v.astype(np.float64)) for k, v in entries.items()}
            ),
            FITRES_COUNT: MetricRecord({"num_examples": int(weight)}),
            "fitres.metrics": ConfigRecord({}),
            "fitres.status": ConfigRecord({"code": 0, "message": "ok"}),
            INDEX: ConfigRecord(
                {
                    "names": list(entries),
                    "shapes": [",".join(map(str, v.shape)) for v in entries.values()],
                    "dtypes": [v.dtype.str for v in entries.values()],
                }
            ),
        }
    )
    scalars = {k: v for k, v in reply.scalars.items() if k != "num_examples"}
    payload_to_records(Payload({}, scalars), out)
    return out
