"""A run's ``results.jsonl``: one flat JSON line per record, labelled with the run.

Every line carries the run's labels (``method``, ``target``, ``seed``), its
``kind`` (``round``, ``timing``, ``eval``, ``selection``, ``failure``) and its
``round``; tables and plots are computed from these lines afterwards. Records
also go to the run's experiment tracker (:mod:`fedpath.runtime.tracking`),
except a transport's failure records, which are the run's own log.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fedpath.runtime.persistence import RESULTS
from fedpath.runtime.tracking import NO_TRACKING, Tracker
from fedpath.utils.io import append_jsonl


class RunLog:
    """Appends the labelled records of one run to its ``results.jsonl``."""

    def __init__(self, run_dir: Path, labels: Mapping[str, Any]) -> None:
        self.path = run_dir / RESULTS
        self.labels = dict(labels)
        #: the tracker of the running run (none outside :meth:`Run.run`)
        self.tracker: Tracker = NO_TRACKING

    def append(self, kind: str, rnd: int, fields: Mapping[str, Any]) -> None:
        """One ``results.jsonl`` line (also given to the tracker)."""
        record = {**self.labels, "kind": kind, "round": rnd, **fields}
        append_jsonl(self.path, record)
        self.tracker.add(record)

    def eval(
        self, rnd: int, kind: str, domain: str, metrics: Mapping[str, Any]
    ) -> None:
        """A ``kind: eval`` line: ``metrics`` of one split (``kind``) of ``domain``."""
        self.append("eval", rnd, {"split": kind, "domain": domain, **metrics})

    def failure(
        self, rnd: int, stage: str, cid: str, node: int | None, reason: str
    ) -> None:
        """A ``kind: failure`` line: a client that did not answer a stage (not
        tracked: the tracker logs the rounds' results)."""
        append_jsonl(
            self.path,
            {
                **self.labels,
                "kind": "failure",
                "round": rnd,
                "stage": stage,
                "client": cid,
                "node": node,
                "reason": reason,
            },
        )
