"""The Flower runtime: any registered fedpath algorithm over Flower's deployment engine.

One SuperNode is one fedpath client (a hospital, or one partition of one); the
SuperLink's ServerApp runs the server half of the algorithm, round by round, exactly
as :class:`~fedpath.runtime.inprocess.InProcessRun` does, and only the transport
differs: a stage's :class:`~fedpath.types.Payload` travels as one ``ArrayRecord`` per
array group plus a ``ConfigRecord`` of scalars (:mod:`.records`).

This package is the adapter and converts types and nothing else; standing a
federation up (certificates, node keys, processes, the node launcher and its
worker, ``fedpath flower ...``) is :mod:`fedpath.deploy`, which imports this
package and is never imported by it. Modules (``flwr`` is imported by them, never
by this package, so ``import fedpath`` works without Flower installed):

- :mod:`.records`: Payload <-> ``RecordDict``, bit-exact;
- :mod:`.server_app`: the ``ServerApp`` (coordinator): the round loop over
  :mod:`.transport` (nodes, stages; sent by :mod:`.messenger`);
- :mod:`.nodes`: run settings, which node serves which client, message I/O;
- :mod:`.identity`: client ids bound to node keys (the signed ``hello``);
- :mod:`.client_app`: the ``ClientApp`` (one hospital's node), on top of
  :mod:`.node_context` (the node's client and experiment, error replies) and
  :mod:`.node_data` (its client split as in-process, datasets kept per process);
- :mod:`.worker_protocol`: the ClientApp's side of the node's persistent worker;
- :mod:`.node_state`: a node's client state on its own disk, for exact resume;
- :mod:`.secagg`, :mod:`.secagg_server`: SecAgg+ on the fit stage (Flower's
  ``secaggplus_mod`` on the node, ``SecAggPlusWorkflow`` at the coordinator).
- :mod:`.central_dp`: ``dp_fedavg``'s clip on the node (Flower's
  ``fixedclipping_mod``).

The names below are the message protocol shared by the two apps.
"""

from __future__ import annotations

#: Version of the fedpath-over-Flower message layout (bumped on incompatible change).
PROTOCOL = 2  # 2: stage payloads packed (records.py)

#: ConfigRecord that carries the message header (stage, round, client...).
META = "fedpath"
#: Prefix of a node's ClientState records in ``context.state`` (then target/seed).
STATE_PREFIX = "state"

#: Message type of every stage: the stage name travels in the header, because
#: stages are chosen by the algorithm at run time while Flower routes on names
#: registered when the ClientApp is imported.
STAGE_MESSAGE = "train"
#: Stage (in the header) asking a client to evaluate its deployed model on its own
#: test split (``evaluation.protocol: local``); the reply carries metrics only.
EVALUATE_STAGE = "fedpath.evaluate"
#: Stage asking a source client to score the global weights on its validation
#: slides (``partition.validation``): metrics every round; at the end, its
#: predictions if its policy shares them (:mod:`fedpath.runtime.selection`).
VALIDATE_STAGE = "fedpath.validate"
#: Query asking a node which fedpath client it serves.
HELLO_MESSAGE = "query.hello"

#: Run-config keys (``[tool.flwr.app.config]`` of the Flower app).
RC_CONFIG = "fedpath-config"
RC_RESUME = "resume"
RC_REPLY_TIMEOUT = "reply-timeout"
RC_WAIT_NODES = "wait-nodes"
RC_ON_FAILURE = "on-failure"
#: client id -> the OpenSSH public key that must sign its hellos (YAML mapping)
RC_REGISTRY = "client-registry"
#: true: run without a registry, the nodes declare their client ids (logged)
RC_SELF_DECLARED = "allow-self-declared-ids"

#: Node-config keys (``flower-supernode --node-config``).
NC_CLIENT = "client-id"
NC_DATA_NAME = "data-name"
NC_DATA_ROOT = "data-root"
NC_DATA_PARAMS = "data-params"
NC_DEVICE = "device"
NC_THREADS = "threads"
#: path of the node's persistent worker socket (set by ``fedpath flower supernode``)
NC_WORKER = "worker"
#: folder where the node also keeps its client state (exact resume, .node_state)
NC_STATE_DIR = "state-dir"
NC_DP_CLIP = "dp-clipping-norm"
NC_DP_SENSITIVITY = "dp-sensitivity"
NC_DP_EPSILON = "dp-epsilon"
NC_DP_DELTA = "dp-delta"
