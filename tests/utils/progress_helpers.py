"""What the progress tests share: a fake clock, the lines' text, and a suite
driven through a reporter."""

from __future__ import annotations

import re
from datetime import datetime

from fedpath.utils.progress import Reporter

STAMP = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\] (.*)$")


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t

    def tick(self, seconds: float) -> None:
        self.t += seconds


def messages(text: str) -> list[str]:
    """The lines' text after their timestamps, each timestamp checked to parse."""
    out = []
    for line in text.splitlines():
        m = STAMP.match(line)
        assert m, f"no timestamp: {line!r}"
        datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S")
        out.append(m.group(2))
    return out


def stamped(text: str) -> list[str]:
    """As :func:`messages`, ignoring other lines (a library's warning)."""
    return messages("\n".join(ln for ln in text.splitlines() if STAMP.match(ln)))


def drive(rep: Reporter, clock: FakeClock, resumed: bool = False) -> None:
    """A suite of 2 methods x 2 runs x 3 rounds, 2 clients a round; each client
    trains 4 s, each round takes 10 s. With ``resumed``: the first run was
    finished before."""
    rep.start_suite(4, 2, 12)
    for k, method in enumerate(("fedavg", "fedprox"), 1):
        rep.start_method(k, 2, method)
        rep.start_runs(2)
        for target in ("h0", "h1"):
            label = f"{method} -> {target} (seed 0)"
            if resumed and k == 1 and target == "h0":
                rep.skip_run(label, 3)
                continue
            rep.start_run(label, 3)
            for rnd in (1, 2, 3):
                rep.start_round(rnd, 2)
                for cid in ("c0", "c1"):
                    rep.start_client(cid, 1)
                    rep.epoch(1, 1)
                    clock.tick(4)
                    rep.end_client()
                clock.tick(2)
                rep.end_round(f"acc 0.{rnd}00")
            rep.end_run()
