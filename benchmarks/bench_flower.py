"""fedpath over Flower's deployment engine vs in-process: round time, bytes, start-up.

The same leave-one-hospital-out fold (ResNet-18 on synthetic hospitals; by default
tiny data, so that a round is dominated by moving the weights; ``--samples`` and
``--image-size`` give the nodes real work) runs in-process and over a local
federation (a SuperLink and one SuperNode per client, started as subprocesses on
this machine, insecure), with fedpath's nodes (persistent worker, 0.2 s idle poll)
and with plain ``flower-supernode`` nodes. Reported per algorithm:

- start-up: SuperLink up; SuperNodes connected; ``flwr run`` -> first round begins
  (FAB install, ServerApp start, node discovery);
- wall time per round (the runtime's own timing records: client exchange + server +
  evaluation + checkpoint), Flower / in-process;
- bytes per round: payload bytes (what fedpath counts in-process) and the records
  Flower moves, up and down, and for FedStain the statistics' share;
- the serialization alone: Payload -> records -> Flower's object bytes -> Payload
  for one ResNet-18 state (what the transport costs without processes).

Target: Flower round time <= 1.2x in-process once the federation is up.

    python benchmarks/bench_flower.py [--rounds 3] [--algorithms fedavg,fedstain]
        [--nodes worker,plain] [--samples 24] [--image-size 32] [--local-epochs 1]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import setup_threads

from fedpath.config import ExperimentConfig, load_config
from fedpath.deploy import flwr_cli, processes
from fedpath.runtime.experiment import run_dir_for, run_experiment
from fedpath.runtime.flower import (
    RC_CONFIG,
    RC_REPLY_TIMEOUT,
    RC_SELF_DECLARED,
    RC_WAIT_NODES,
)
from fedpath.utils.io import read_jsonl

CLIENTS = ["hospital_0/c0", "hospital_1/c0"]


def config(
    out: Path,
    algorithm: str,
    rounds: int,
    threads: int,
    samples: int = 24,
    image_size: int = 32,
    local_epochs: int = 1,
) -> ExperimentConfig:
    return load_config(
        None,
        [
            f"output_dir={out}",
            "seeds=[0]",
            "model.backbone=resnet18",
            "data.params.num_hospitals=3",
            f"data.params.samples_per_hospital={samples}",
            f"data.params.image_size={image_size}",
            "data.params.slides_per_hospital=4",
            "partition.clients_per_domain=1",
            "lodo.targets=[hospital_2]",
            f"train.rounds={rounds}",
            f"train.local_epochs={local_epochs}",
            "train.batch_size=16",
            f"algorithm.name={algorithm}",
            f"runtime.threads={threads}",
        ],
    )


def rounds_of(cfg: ExperimentConfig) -> tuple[list[dict[str, Any]], list[float]]:
    path = run_dir_for(cfg, "hospital_2", 0) / "results.jsonl"
    rows = list(read_jsonl(path))
    timing = [r for r in rows if r["kind"] == "timing"]
    walls = [
        r["client_s"] + r["server_s"] + r["eval_s"] + r["checkpoint_s"] for r in timing
    ]
    return [r for r in rows if r["kind"] == "round"], walls


def serialization_s(cfg: ExperimentConfig) -> tuple[float, int]:
    """Seconds for one ResNet-18 state through records and Flower's object bytes."""
    from flwr.app import RecordDict
    from flwr.supercore.inflatable.inflatable_object import get_all_nested_objects
    from flwr.supercore.inflatable.inflatable_utils import inflate_object_from_contents

    from fedpath.models.backbones import build_model
    from fedpath.runtime.flower.records import payload_to_records, records_to_payload
    from fedpath.types import Payload, as_numpy_dict

    weights = as_numpy_dict(build_model(cfg.model, 2).state_dict())
    payload = Payload({"weights": weights}, {"round": 1})
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        records = payload_to_records(payload)
        objs = get_all_nested_objects(records)
        contents = {oid: o.deflate() for oid, o in objs.items()}
        back = inflate_object_from_contents(records.object_id, dict(contents))
        assert isinstance(back, RecordDict)
        records_to_payload(back)
        best = min(best, time.perf_counter() - t0)
    return best, sum(len(c) for c in contents.values())


def import_s() -> tuple[float, float]:
    """Seconds a fresh ClientApp process spends importing (Flower; fedpath + torch).

    Flower 1.42 starts one ``flwr-clientapp`` process per message, so every stage
    pays this before any work.
    """
    import subprocess
    import sys

    def timed(code: str) -> float:
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True)
        return time.perf_counter() - t0

    flwr = timed("import flwr.supernode.runtime.run_clientapp")
    full = timed(
        "import flwr.supernode.runtime.run_clientapp, torch, fedpath.algorithms, "
        "fedpath.runtime.experiment, fedpath.runtime.flower.client_app"
    )
    return flwr, full


def flower_run(
    root: Path, cfg: ExperimentConfig, rounds: int, worker: bool, node_threads: int
) -> dict[str, float]:
    """One run over a local federation; ``worker``: fedpath nodes, else plain Flower."""
    out: dict[str, float] = {}
    t0 = time.perf_counter()
    link, address = processes.start_superlink(root / "link")
    out["superlink_s"] = time.perf_counter() - t0
    services = [link]
    try:
        t0 = time.perf_counter()
        for i, cid in enumerate(CLIENTS):
            services.append(
                processes.start_supernode(
                    root,
                    f"node{i}",
                    address,
                    {"client-id": cid, "threads": node_threads},
                    worker=worker,
                    poll_interval=processes.POLL_INTERVAL if worker else None,
                )
            )
        for svc in services[1:]:
            svc.wait_log("SuperNode ID", 120)
        out["supernodes_s"] = time.perf_counter() - t0
        home = root / "cli"
        flwr_cli.write_connection(home, "bench", address)
        app = flwr_cli.write_app(root / "app")
        run_dir = run_dir_for(cfg, "hospital_2", 0)
        results = run_dir / "results.jsonl"
        t0 = time.perf_counter()
        run_id = flwr_cli.start_run(
            app,
            "bench",
            home,
            {
                RC_CONFIG: cfg.to_yaml(),
                RC_REPLY_TIMEOUT: 600.0,
                RC_WAIT_NODES: 120.0,
                RC_SELF_DECLARED: True,  # a benchmark on loopback: no node keys
            },
        )
        processes.wait_for(
            lambda: (run_dir / "config.yaml").is_file(),
            300,
            "ServerApp start",
            services,
        )
        out["run_to_serverapp_s"] = time.perf_counter() - t0
        processes.wait_for(
            lambda: results.is_file() and '"kind": "timing"' in results.read_text(),
            600,
            "round 1",
            services,
        )
        out["run_to_round1_end_s"] = time.perf_counter() - t0
        flwr_cli.wait_run(
            run_id, "bench", home, 600 * rounds, done=(run_dir / "final.json").is_file
        )
        out["run_total_s"] = time.perf_counter() - t0
    finally:
        for svc in reversed(services):
            svc.stop()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--algorithms", default="fedavg,fedstain")
    ap.add_argument(
        "--nodes",
        default="worker,plain",
        help="worker: fedpath's nodes (persistent worker, 0.2 s poll); plain: "
        "plain flower-supernode (fresh process per message, 3 s poll)",
    )
    ap.add_argument("--samples", type=int, default=24, help="images per hospital")
    ap.add_argument("--image-size", type=int, default=32)
    ap.add_argument("--local-epochs", type=int, default=1)
    ap.add_argument(
        "--node-threads",
        type=int,
        default=None,
        help="torch threads per SuperNode (default: threads / nodes, so that the "
        "nodes together use the cores the in-process run uses)",
    )
    args = ap.parse_args()
    threads = setup_threads()
    node_threads = args.node_threads or max(1, threads // len(CLIENTS))
    modes = args.nodes.split(",")
    train_images = int(args.samples * 0.75)  # the synthetic hospitals' train split
    print(
        f"ResNet-18, {args.image_size} px, {len(CLIENTS)} clients x ~{train_images} "
        f"training images, {args.local_epochs} local epoch(s), {args.rounds} "
        f"rounds; in-process: {threads} torch "
        f"thread(s), clients in turn; Flower: {node_threads} per node, nodes at once"
    )
    for algorithm in args.algorithms.split(","):
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            size = (args.samples, args.image_size, args.local_epochs)
            inproc = config(root / "inproc", algorithm, args.rounds, threads, *size)
            t0 = time.perf_counter()
            run_experiment(inproc)
            inproc_total = time.perf_counter() - t0
            rows_i, walls_i = rounds_of(inproc)
            ser_s, ser_bytes = serialization_s(inproc)
            flower: dict[str, tuple[dict[str, float], list[Any], list[float]]] = {}
            for mode in modes:
                cfg = config(root / mode, algorithm, args.rounds, threads, *size)
                startup = flower_run(
                    root / f"fed-{mode}",
                    cfg,
                    args.rounds,
                    mode == "worker",
                    node_threads,
                )
                flower[mode] = (startup, *rounds_of(cfg))
        steady_i = statistics.median(walls_i[1:] or walls_i)
        print(f"\n== {algorithm}")
        print(
            f"in-process whole run {inproc_total:.1f} s (incl. data and model set-up)"
        )
        for mode, (startup, rows_f, walls_f) in flower.items():
            steady_f = statistics.median(walls_f[1:] or walls_f)
            print(f"-- Flower, {mode} nodes")
            fmt = (
                "start-up: SuperLink {superlink_s:.1f} s, SuperNodes {supernodes_s:.1f}"
                " s, flwr run -> ServerApp {run_to_serverapp_s:.1f} s, -> end of "
                "round 1 {run_to_round1_end_s:.1f} s, whole run {run_total_s:.1f} s"
            )
            print(fmt.format(**startup))
            print(
                "round  in-process_s  flower_s  ratio  payload_up_MB  payload_down_MB"
                "  records_up_MB  records_down_MB"
            )
            for ri, rf, wi, wf in zip(rows_i, rows_f, walls_i, walls_f, strict=True):
                print(
                    f"{ri['round']:>5}  {wi:12.2f}  {wf:8.2f}  {wf / wi:5.2f}  "
                    f"{rf['bytes_up'] / 1e6:13.2f}  {rf['bytes_down'] / 1e6:15.2f}  "
                    f"{rf['wire_bytes_up'] / 1e6:13.2f}  "
                    f"{rf['wire_bytes_down'] / 1e6:15.2f}"
                )
                assert rf["bytes_up"] == ri["bytes_up"], "payload bytes differ"
            stats = [r for r in rows_f if "stats/pool_entries" in r]
            if stats:
                entries = stats[0]["stats/pool_entries"]
                stats_bytes = entries * 4 * 3 * 4  # moments x channels x float32
                weights_mb = (rows_f[0]["bytes_up"] - stats_bytes) / 1e6
                print(
                    f"statistics up per round: {stats_bytes} B ({entries} pooled "
                    f"entries) vs weights {weights_mb:.1f} MB up"
                )
            print(
                f"steady round (median of rounds 2..): in-process {steady_i:.2f} s, "
                f"Flower {steady_f:.2f} s, ratio {steady_f / steady_i:.2f} "
                "(target <= 1.2)"
            )
            print(
                json.dumps(
                    {
                        "algorithm": algorithm,
                        "nodes": mode,
                        **startup,
                        "steady_inproc_s": steady_i,
                        "steady_flower_s": steady_f,
                    }
                )
            )
        print(
            f"serialization alone, one ResNet-18 state ({ser_bytes / 1e6:.1f} MB of "
            f"Flower objects): {ser_s:.3f} s"
        )
    flwr_imp, full_imp = import_s()
    print(
        f"a fresh ClientApp process (plain nodes: one per message): import flwr "
        f"{flwr_imp:.1f} s, + torch and fedpath {full_imp:.1f} s"
    )


if __name__ == "__main__":
    main()
