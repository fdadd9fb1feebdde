"""Parallel suites: the same small suite serially, with --jobs 1 and --jobs 2.

The demo's synthetic hospitals (reduced: ``--samples`` patches per hospital),
``--methods`` x every held-out hospital x one seed. Each launcher writes its own
output folder; the benchmark checks that every ``final.json`` is byte-identical
across them and prints the wall time of each and the ratios.

* ``serial, 1 thread``: today's in-process suite, ``runtime.threads=1``;
* ``serial, all threads``: the same, ``runtime.threads`` = the cores (what a
  plain ``fedpath suite`` does on an idle machine; not byte-comparable: torch's
  kernels round differently with another thread count);
* ``--jobs 1`` / ``--jobs 2``: the local launcher, one thread per cell.

Run it on an otherwise idle machine (nothing else on the cores)::

    python benchmarks/bench_launch.py [--methods fedavg fedprox fedbn] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from fedpath.cli import main as fedpath_main
from fedpath.runtime.launch import cores


def _finals(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in out.rglob("final.json")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--methods", nargs="+", default=["fedavg", "fedprox", "fedbn"])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--samples", type=int, default=200)
    ap.add_argument("--out", type=Path, help="keep the runs here (default: a temp dir)")
    args = ap.parse_args()
    os.environ.setdefault("FEDPATH_PROGRESS", "none")
    work = args.out or Path(tempfile.mkdtemp(prefix="fedpath-bench-launch-"))
    work.mkdir(parents=True, exist_ok=True)
    suite = work / "suite.yaml"
    variants = "".join(f"  {m}: [algorithm.name={m}]\n" for m in args.methods)
    suite.write_text(
        "description: launcher benchmark\nbase: base.yaml\nvariants:\n" + variants
    )
    (work / "base.yaml").write_text(
        "name: launch\ndata:\n  name: synthetic\nalgorithm:\n  name: fedavg\n"
    )
    common = [
        f"data.params.samples_per_hospital={args.samples}",
        f"train.rounds={args.rounds}",
        "seeds=[0]",
    ]
    n = cores()
    multi = f"serial, {n} threads"
    plans = {
        "serial, 1 thread": ["runtime.threads=1"],
        multi: [f"runtime.threads={n}"],
        "--jobs 1": ["runtime.threads=1", "--jobs", "1"],
        "--jobs 2": ["runtime.threads=1", "--jobs", "2"],
    }
    walls: dict[str, float] = {}
    finals: dict[str, dict[str, bytes]] = {}
    for k, (name, extra) in enumerate(plans.items()):
        out = work / f"out{k}"
        over = [e for e in extra if "=" in e]
        flags = [e for e in extra if "=" not in e]
        argv = ["suite", str(suite), *common, *over, f"output_dir={out}", "-q", *flags]
        t0 = time.perf_counter()
        if fedpath_main(argv) != 0:
            raise SystemExit(f"{name} failed")
        walls[name] = time.perf_counter() - t0
        finals[name] = _finals(out)
        print(f"{name}: {walls[name]:.1f} s ({len(finals[name])} cells)", flush=True)
    same = finals["serial, 1 thread"] == finals["--jobs 1"] == finals["--jobs 2"]
    print(
        f"\n{len(args.methods)} methods x {len(finals['--jobs 1'])} cells on {n} cores"
    )
    print(f"final.json byte-identical (serial 1 thread, --jobs 1, --jobs 2): {same}")
    one, two = walls["--jobs 1"], walls["--jobs 2"]
    print(f"wall time --jobs 1 / --jobs 2: {one / two:.2f}x")
    print(f"wall time serial {n} threads / --jobs 2: {walls[multi] / two:.2f}x")
    print(
        f"wall time serial 1 thread / --jobs 1: {walls['serial, 1 thread'] / one:.2f}x"
    )
    if not same:
        raise SystemExit("the launchers' final.json files differ")


if __name__ == "__main__":
    main()
