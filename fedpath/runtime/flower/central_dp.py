"""Client-level DP on the node: Flower's ``fixedclipping_mod`` on ``dp_fedavg``'s fit.

Central DP as Flower builds it: every client clips its update to L2 norm C on
its own machine, the coordinator averages and adds Gaussian noise of standard
deviation z C / m (:mod:`fedpath.algorithms.dp_fedavg`, with Flower's
``compute_stdv``). The clip is what a hospital can enforce, so it runs in the
node's ClientApp, after the client half, as Flower's own
``flwr.clientapp.mod.fixedclipping_mod``: whatever the fedpath client code
returns, the floating entries of the ``fit`` reply leave the node at most C away
from the weights the node received.

The mod works on Flower's central-DP message layout (exactly one ArrayRecord,
the model, and one ConfigRecord holding ``clipping_norm``; the reply's
ArrayRecord with the keys of the received one, in order), while fedpath's stage
messages carry a header, scalars and packed groups (:mod:`.records`).
:func:`node_clipping_mod` adapts the two ends, as :mod:`.secagg` does for
``secaggplus_mod``:

- the mod sees the received ``weights`` group's floating entries and
  ``clipping_norm`` = the run's ``algorithm.params.clip`` (the run config's, the
  value the client half and the server use; the node policy's ``max_dp_clip``
  caps it, :func:`fedpath.runtime.guard.check_caps`), never a value taken from
  the message;
- its inner handler runs the client half on the fedpath message, marked
  :data:`~fedpath.algorithms.dp_fedavg.NODE_CLIPS` (set here, whatever the
  coordinator sent) so the half leaves the clip to the mod: one clip, by the
  same Flower function as in-process, so a run over Flower equals the run
  in-process bit for bit; it hands the mod the reply's floating entries;
- the clipped entries go back into fedpath's reply (header, scalars and
  layout as the client half made them).

Refused, as an error reply naming the node: a reply with another array group
than ``weights``, other floating entries than those received (Flower's own key
check), integer entries that changed (the clip does not cover them) and an
update that is not finite or, clipped, not within C (a NaN entry would make
Flower's norm NaN and its scale 1, i.e. no clip at all).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.clientapp.mod import fixedclipping_mod
from flwr.clientapp.typing import ClientAppCallable
from flwr.supercore.differential_privacy import KEY_CLIPPING_NORM

from fedpath.algorithms.dp_fedavg import NODE_CLIPS, float_keys, update_norm
from fedpath.algorithms.names import FIT, WEIGHTS
from fedpath.runtime.flower import META
from fedpath.runtime.flower.records import (
    PACKED,
    SCALARS,
    RecordError,
    payload_to_records,
    records_to_payload,
)
from fedpath.runtime.guard import algorithm_params
from fedpath.types import ArrayDict, Payload
from fedpath.wire import declared

#: the two records of the message layout Flower's central-DP mods expect
DP_ARRAYS = "fedpath.dp/weights"
DP_CONFIG = "fedpath.dp/config"
#: slack on the clipped norm: float32 norms and the rounding of w + u
NORM_RTOL = 1e-3


class ClipError(RecordError):
    """A ``fit`` reply the node will not release under the clip."""


def node_clipping_mod(
    msg: Message, context: Context, call_next: ClientAppCallable
) -> Message:
    """Flower's ``fixedclipping_mod`` on the ``fit`` replies of the algorithms
    the node clips (those that declare ``Wire.dp_clip``, :mod:`fedpath.wire`);
    other messages pass through."""
    from fedpath.runtime.flower.node_context import NodeError, error_reply

    meta = msg.content.config_records.get(META) if msg.has_content() else None
    if meta is None or meta.get("stage") != FIT:
        return call_next(msg, context)
    try:
        clip = run_clip(context)
        content = msg.content
        sent = {} if clip is None else _weights(records_to_payload(content), "message")
    except Exception as err:
        return error_reply(msg, context, err)
    if clip is None:
        return call_next(msg, context)
    keys = float_keys(sent)
    scalars = content.config_records.get(SCALARS)
    if scalars is None:
        scalars = content[SCALARS] = ConfigRecord()
    scalars[NODE_CLIPS] = True  # the node's word, never the coordinator's
    seen: dict[str, Any] = {}

    def inner(shaped: Message, ctxt: Context) -> Message:
        msg.content = content
        out = call_next(msg, ctxt)
        seen["out"] = out
        if out.has_error():
            return out
        seen["reply"] = reply = records_to_payload(out.content)
        weights = _weights(reply, "reply")
        floats = {k: Array(weights[k]) for k in float_keys(weights)}
        return Message(RecordDict({DP_ARRAYS: ArrayRecord(floats)}), reply_to=msg)

    msg.content = RecordDict(
        {
            DP_ARRAYS: ArrayRecord({k: Array(sent[k]) for k in keys}),
            DP_CONFIG: ConfigRecord({KEY_CLIPPING_NORM: clip}),
        }
    )
    clipped: Message | None = None
    try:
        clipped = fixedclipping_mod(msg, context, inner)
    except ZeroDivisionError:  # Flower's scale for an update of norm 0
        pass
    except Exception as err:
        return error_reply(msg, context, err)
    finally:
        msg.content = content
    out: Message | None = seen.get("out")
    if out is not None and out.has_error():
        return out  # the client half's own error reply, already naming the node
    if clipped is not None and clipped.has_error():
        reason = clipped.error.reason or f"error code {clipped.error.code}"
        return error_reply(msg, context, NodeError(f"fixedclipping_mod: {reason}"))
    if out is None:
        return error_reply(msg, context, NodeError("fixedclipping_mod: no reply"))
    try:
        reply: Payload = seen["reply"]
        weights = dict(_weights(reply, "reply"))
        if clipped is not None:
            record = clipped.content.array_records[DP_ARRAYS]
            weights.update({k: a.numpy() for k, a in record.items()})
        elif update_norm(weights, sent, keys) != 0.0:
            raise ClipError("fixedclipping_mod failed on a non-zero update")
        check_clipped(weights, sent, clip)
        packed = any(k.startswith(PACKED) for k in out.content.array_records)
        records = payload_to_records(
            Payload({WEIGHTS: weights}, reply.scalars), pack=packed
        )
    except Exception as err:
        return error_reply(msg, context, err)
    records[META] = out.content.config_records[META]
    return Message(records, reply_to=msg)


def run_clip(context: Context) -> float | None:
    """The run's ``algorithm.params.clip`` if the node clips its algorithm's
    ``fit`` replies (None otherwise)."""
    from fedpath.runtime.flower.node_context import experiment_from_run_config

    cfg = experiment_from_run_config(context.run_config)
    wire = declared(cfg.algorithm.name)
    if wire is None or not wire.dp_clip:
        return None
    return float(algorithm_params(cfg).clip)


def _weights(payload: Payload, what: str) -> ArrayDict:
    if set(payload.arrays) != {WEIGHTS}:
        raise ClipError(
            f"the node clips the {WEIGHTS!r} group of a dp_fedavg fit {what}, the "
            f"{what} carries {sorted(payload.arrays)}"
        )
    return payload.arrays[WEIGHTS]


def check_clipped(new: ArrayDict, old: ArrayDict, clip: float) -> None:
    """Refuse a reply that is not within L2 norm ``clip`` of ``old`` on the
    floating entries (float64 norm; slack :data:`NORM_RTOL` plus half a unit in
    the last place of every entry) or whose other entries changed."""
    if set(new) != set(old):
        raise ClipError(
            f"the reply's entries differ from the received ones: "
            f"{sorted(set(new) ^ set(old))}"
        )
    keys = float_keys(old)
    for k, v in old.items():
        if k not in keys and not np.array_equal(new[k], v):
            raise ClipError(
                f"the reply changed the non-floating entry {k!r}, which the clip "
                "does not cover"
            )
    for k in keys:
        if not np.all(np.isfinite(new[k])):
            raise ClipError(f"the reply's entry {k!r} is not finite")
    norm = update_norm(new, old, keys)
    rounding = math.sqrt(
        sum(
            float(np.square(np.spacing(np.abs(new[k])).astype(np.float64) / 2).sum())
            for k in keys
        )
    )
    if not norm <= clip * (1 + NORM_RTOL) + rounding:
        raise ClipError(
            f"the clipped update has L2 norm {norm:.6g}, more than the clip {clip:g}"
        )
