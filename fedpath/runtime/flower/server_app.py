"""The ServerApp: the coordinator runs the server half of an algorithm over a Grid.

Each fold x seed of the experiment is the same round loop as in-process
(:class:`fedpath.runtime.loop.Run`: same initial weights, client roster, client
sampling, evaluation on the held-out domain, ``results.jsonl``, checkpoint and
exact resume, ``final.json`` and ``model.fpm``) over the Flower transport
(:class:`~.transport.FlowerTransport`), because the client halves run on the
SuperNodes: for every stage of ``server.stages(rnd)``, ``server.configure`` gives
one payload per sampled client, each travels as one ``train`` Message to the node
that serves the client, ``grid.send_and_receive`` waits up to ``reply-timeout``
seconds, and the replies go to ``server.aggregate`` exactly as in-process.

A client that fails (error reply, no reply in time, a reply that is not a payload)
is logged with its node id, recorded in ``results.jsonl`` (``kind: failure``) and
left out of that stage (:mod:`.messenger`); the round goes on while
``train.min_replies`` replies remain (``on-failure = "continue"``) or the run stops
at the first failure (``on-failure = "stop"``).

Run-config keys (``[tool.flwr.app.config]``, set by ``fedpath flower run``):
``fedpath-config`` (the resolved experiment YAML), ``resume``, ``reply-timeout``
(seconds per stage), ``wait-nodes`` (seconds to wait at start for a node per
client of the roster), ``on-failure``, ``client-registry`` (client id -> node
public key, :mod:`.identity`) or ``allow-self-declared-ids = true``: a run with
neither is refused. Two nodes claiming one client id stop the run (neither is
used, and going on would leave that client out without a word).

Client state: each node keeps its :class:`~fedpath.types.ClientState` in
``context.state`` for the duration of the Flower run. A coordinator checkpoint
holds the server state only; resuming starts a new Flower run, so a node restores
its client state (FedBN's local normalization layers) only if it keeps it on its
own disk (node config ``state-dir``, :mod:`.node_state`); otherwise
that state restarts from the global model, whereas in-process resume restores it.

Secure aggregation (run config ``secure-aggregation = "secaggplus"``): the fit
stage of the weight-averaging algorithms runs through Flower's SecAgg+ workflow
(:mod:`.secagg_server`); every surviving client's reply is then the unmasked
aggregate with weight 1, so the server half averages exactly that, and a client
that dropped out is missing as from any stage.

Training-domain validation (``partition.validation`` > 0): the validation
slides stay on the nodes. Every evaluation round each source node scores the
global weights on its own validation slides (stage ``fedpath.validate``, metrics
only) and the coordinator selects the round from their mean, as in-process. At
the end the temperature and the operating point are fitted on the validation
predictions (class probabilities and labels) of the nodes whose policy has
``share_validation_predictions: true``; the others are named in the
``calibrated`` block's ``left_out`` (no node shares: no calibration,
``calibration_skipped``). With every node sharing, the run equals the
in-process one exactly.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from fedpath.config import ExperimentConfig
from fedpath.runtime.experiment import load_dataset, plan_runs, run_dir_for
from fedpath.runtime.flower.node_context import experiment_from_run_config
from fedpath.runtime.flower.nodes import FlowerSettings, NodeDirectory
from fedpath.runtime.flower.transport import FlowerTransport
from fedpath.runtime.loop import Run
from fedpath.tasks import prepare_dataset
from fedpath.utils.progress import Reporter

log = logging.getLogger("fedpath")


def run_federation(
    grid: Grid,
    cfg: ExperimentConfig,
    settings: FlowerSettings,
    reporter: Reporter | None = None,
) -> list[dict[str, Any]]:
    """Every fold x seed of ``cfg`` over the grid (as ``run_experiment`` in-process)."""
    import torch

    if cfg.runtime.threads:
        torch.set_num_threads(cfg.runtime.threads)
    dataset = prepare_dataset(cfg, load_dataset(cfg.data), reporter)
    directory = NodeDirectory(grid, settings.reply_timeout, settings.registry)

    def transport(run: Run) -> FlowerTransport:
        return FlowerTransport(run, grid, settings, directory)

    records = []
    plan = plan_runs(cfg, dataset)
    if reporter is not None:
        reporter.start_runs(len(plan))
    config_hash = cfg.hash()  # once: every run of the plan has the same config
    for fold, seed in plan:
        run_dir = run_dir_for(cfg, fold.target, seed)
        run = Run(
            cfg,
            dataset,
            fold,
            seed,
            run_dir,
            reporter,
            transport=transport,
            config_hash=config_hash,
        )
        records.append(run.run(resume=settings.resume))
    return records


app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Entry point of ``flwr run``: the experiment in the run config, over the grid."""
    if not log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(levelname)s fedpath: %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
    settings = FlowerSettings.from_run_config(context.run_config)
    settings.check_client_ids()  # a registry, or the explicit opt-out
    cfg = experiment_from_run_config(context.run_config)
    log.info(
        "experiment %s, algorithm %s, %d round(s); reply-timeout %g s, on-failure %s",
        cfg.name,
        cfg.algorithm.name,
        cfg.train.rounds,
        settings.reply_timeout,
        settings.on_failure,
    )
    for record in run_federation(grid, cfg, settings):
        target = record.get("evaluation", {}).get("target", {})
        log.info(
            "finished %s -> %s seed %s: target accuracy %s",
            record["method"],
            record["target"],
            record["seed"],
            target.get("accuracy"),
        )
