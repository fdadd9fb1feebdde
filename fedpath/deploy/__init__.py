"""Running a real federation of fedpath over Flower: keys, processes, nodes, CLI.

fedpath over Flower has two halves. The *adapter*, :mod:`fedpath.runtime.flower`,
converts types and nothing else: its ServerApp and ClientApp turn a stage's
:class:`~fedpath.types.Payload` into Flower records and back and call the same
algorithm code as the in-process runtime. This package is the *deployment*: what a
coordinator and the hospitals need to stand the federation up and keep it running,
none of which changes a result.

- :mod:`.pki`: a private CA and SuperLink certificate, SuperNode key pairs;
- :mod:`.processes`: the ``flower-superlink`` / ``flower-supernode`` commands and
  :class:`~.processes.Service`, a started process stopped with its descendants;
- :mod:`.flwr_cli`: the Flower app folder, connections and runs through ``flwr``;
- :mod:`.node`: the node launcher (worker supervisor, idle-poll cap) around
  Flower's own SuperNode;
- :mod:`.worker`: the serving side of the node's persistent worker (an
  authenticated local Unix socket);
- :mod:`.cli`: ``fedpath flower certs | keys | app | connect | superlink |
  supernode | run``.

``deploy`` sits above the runtime and the runtime never imports it: what a node
does while it serves a run (the worker's calling side,
:mod:`fedpath.runtime.flower.worker_protocol`; its client state on its own disk,
:mod:`fedpath.runtime.flower.node_state`; signing its hello,
:mod:`fedpath.runtime.flower.identity`) is part of the adapter, and this package
imports it from there. Nothing here is imported by ``import fedpath``, and Flower
is imported by the modules that need it, never by this file.
"""
