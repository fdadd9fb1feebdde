"""Experiment tracking: a run's per-round records, also in TensorBoard or MLflow.

``runtime.tracking: tensorboard`` or ``mlflow`` (default ``none``) logs every record
the run appends to ``results.jsonl`` (``kind`` round, eval, timing, selection) as
scalars whose step is the round, named ``<kind>[/<split>/<domain>]/<field>``
(``eval/target/hospital_1/accuracy``, ``round/fit/loss``, ``timing/client_s``);
the run's identity (method, target, seed, config hash) goes along as text
(TensorBoard) or tags, with the resolved config as params and ``config.yaml`` as an
artifact (MLflow). Where the logs go (``runtime.tracking_dir``: null):

- TensorBoard: ``<run_dir>/tensorboard/``, or
  ``<tracking_dir>/<name>/<method>/<target>/seed<seed>/``;
- MLflow: a local file store ``<output_dir>/mlruns`` (or ``<tracking_dir>``), one
  experiment per config ``name`` and one MLflow run per fedpath run, whose id is
  kept in ``<run_dir>/mlflow_run.json`` so that ``--resume`` continues it.

A round's records are logged when the round is committed (after its checkpoint),
never as they are appended: a crash drops the round in progress from the tracker as
``--resume`` drops it from ``results.jsonl``, and a resumed run logs the rounds
after its checkpoint only, so no round is logged twice. A tracker that has none of
the earlier rounds (tracking turned on at ``--resume``, logs deleted) gets them
from ``results.jsonl`` first. A fresh run (or one resumed without a checkpoint)
replaces the earlier attempt's logs, as it replaces its ``results.jsonl``.

Tracking never stops or noticeably slows a run: the backends are imported when a
tracked run starts (a missing package is a :class:`~fedpath.config.ConfigError` when
the config is loaded, naming the extra to install), a round is logged in one batch,
and every call into a backend is guarded: the first failure logs a warning and
turns tracking off for the rest of the run, which goes on.

This module imports no PyTorch, TensorBoard or MLflow at import time; config
validation checks a backend's package is installed without it
(:func:`fedpath.config_sections.check_backend`). The scalars' names and the
logs' folders are in :mod:`fedpath.runtime.tracking_names`.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fedpath.runtime.same_config import flat_keys
from fedpath.runtime.tracking_names import (
    MLFLOW_RUN,
    mlflow_store,
    run_path,
    scalars,
    tensorboard_dir,
)

if TYPE_CHECKING:
    from fedpath.config import ExperimentConfig

log = logging.getLogger("fedpath")

#: TensorBoard's event files
_EVENTS = "events.out.tfevents.*"
#: MLflow's limits per ``log_batch`` call and per param value
_MAX_METRICS, _MAX_PARAMS, _MAX_PARAM_CHARS = 1000, 100, 6000


def _chunks(items: list[Any], size: int) -> Iterator[list[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


# ------------------------------------------------------------------------ trackers


class Tracker:
    """No tracking (``runtime.tracking: none``), and the backends' common part.

    :meth:`add` buffers a record (cheap: called for every ``results.jsonl`` line);
    :meth:`commit` logs the buffered records once their round is checkpointed;
    :meth:`close` ends the run. A backend implements :meth:`_log` and
    :meth:`_close`; every call into it goes through :meth:`_guard`.
    """

    backend = "none"

    def __init__(self) -> None:
        self.enabled = False
        #: nothing was logged before this run started (no earlier rounds)
        self.fresh = True
        self._pending: list[Mapping[str, Any]] = []

    def add(self, record: Mapping[str, Any]) -> None:
        """Buffer one record of the round in progress."""
        if self.enabled:
            self._pending.append(record)

    def commit(self, rnd: int) -> None:
        """Log the buffered records (of round ``rnd``, now checkpointed)."""
        if not self.enabled:
            return
        records, self._pending = self._pending, []
        steps: dict[int, dict[str, float]] = {}
        for record in records:
            steps.setdefault(int(record.get("round", rnd)), {}).update(scalars(record))
        for step in sorted(steps):
            self._guard(self._log, step, steps[step])

    def close(self, finished: bool) -> None:
        """End tracking; ``finished``: the run completed (else it failed or was
        interrupted, and the uncommitted records are dropped)."""
        self._pending = []
        if self.enabled:
            self._guard(self._close, finished)
            self.enabled = False

    def _guard(self, call: Callable[..., None], *args: Any) -> None:
        try:
            call(*args)
        except Exception as err:  # a tracker never stops a run
            log.warning(
                "%s tracking failed and is off for the rest of this run (the run "
                "goes on; its results.jsonl is complete): %s: %s",
                self.backend,
                type(err).__name__,
                err,
            )
            self.enabled = False

    def _log(self, step: int, values: Mapping[str, float]) -> None:
        """Log one round's scalars (a backend's hook)."""

    def _close(self, finished: bool) -> None:
        """Flush and end the backend's run (a backend's hook)."""


#: the tracker of runs that track nothing (stateless while disabled)
NO_TRACKING = Tracker()


def _identity(
    cfg: ExperimentConfig, labels: Mapping[str, Any], config_hash: str
) -> dict[str, str]:
    from fedpath.version import __version__

    return {
        "method": str(labels["method"]),
        "target": str(labels["target"]),
        "seed": str(labels["seed"]),
        "config_hash": config_hash,
        "algorithm": cfg.algorithm.name,
        "fedpath_version": __version__,
    }


class TensorBoardTracker(Tracker):
    """Scalars to TensorBoard event files (``torch.utils.tensorboard``).

    Plain float32 scalar summaries: TensorBoard's default (fast) loader shows no
    float64 scalars, so the values are ``results.jsonl``'s rounded to float32
    (about 7 significant digits; MLflow keeps them exactly).
    """

    backend = "tensorboard"

    def __init__(
        self,
        cfg: ExperimentConfig,
        run_dir: Path,
        labels: Mapping[str, Any],
        start: int,
        config_hash: str,
    ) -> None:
        super().__init__()
        from torch.utils.tensorboard import SummaryWriter

        self.dir = tensorboard_dir(cfg, run_dir, labels)
        old = sorted(self.dir.glob(_EVENTS))
        if start == 1:  # a fresh run: the earlier attempt's events go
            for path in old:
                path.unlink(missing_ok=True)
            old = []
        self.fresh = not old
        # purge_step: TensorBoard hides any event of the crashed attempt at a step
        # >= start (none is written, as rounds are committed after their checkpoint)
        self.writer = SummaryWriter(str(self.dir), purge_step=start if old else None)
        if self.fresh:
            rows = "\n".join(
                f"| {k} | {v} |" for k, v in _identity(cfg, labels, config_hash).items()
            )
            self.writer.add_text(
                "fedpath/run", f"| key | value |\n|---|---|\n{rows}", 0
            )
            yaml_text = "\n".join("    " + line for line in cfg.to_yaml().splitlines())
            self.writer.add_text("fedpath/config", yaml_text, 0)
        self.enabled = True

    def _log(self, step: int, values: Mapping[str, float]) -> None:
        for name, value in values.items():
            self.writer.add_scalar(name, value, step)
        self.writer.flush()

    def _close(self, finished: bool) -> None:
        self.writer.close()


class MlflowTracker(Tracker):
    """Metrics, params, tags and artifacts to an MLflow file store (no server).

    MLflow 3 keeps its file store in maintenance mode and refuses it unless
    ``MLFLOW_ALLOW_FILE_STORE`` is true; fedpath sets it (and
    ``MLFLOW_DISABLE_TELEMETRY``: a run sends nothing anywhere) in its own
    process unless they are set already.
    """

    backend = "mlflow"

    def __init__(
        self,
        cfg: ExperimentConfig,
        run_dir: Path,
        labels: Mapping[str, Any],
        start: int,
        config_hash: str,
    ) -> None:
        super().__init__()
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
        from mlflow.tracking import MlflowClient

        from fedpath.utils.io import atomic_write_text

        self.run_dir = run_dir
        self.uri = mlflow_store(cfg).absolute().as_uri()
        self.client = MlflowClient(tracking_uri=self.uri)
        old = self._stored_run()
        if old is not None and start == 1:  # a fresh run replaces the earlier one
            self.client.delete_run(old)
            old = None
        self.fresh = old is None
        tags = _identity(cfg, labels, config_hash)
        if old is None:
            experiment = self._experiment(cfg.name)
            name = "/".join(run_path(cfg, labels).parts[1:])
            run = self.client.create_run(experiment, tags=tags, run_name=name)
            self.run_id: str = run.info.run_id
            self._log_params(cfg)
            record = {"run_id": self.run_id, "tracking_uri": self.uri}
            atomic_write_text(run_dir / MLFLOW_RUN, json.dumps(record) + "\n")
        else:
            self.run_id = old
            self.client.update_run(old, status="RUNNING")
            for key, value in tags.items():
                self.client.set_tag(old, key, value)
        if (run_dir / "config.yaml").is_file():
            self.client.log_artifact(self.run_id, str(run_dir / "config.yaml"))
        self.enabled = True

    def _stored_run(self) -> str | None:
        """The run id of ``mlflow_run.json`` if that run is live in this store."""
        path = self.run_dir / MLFLOW_RUN
        try:
            stored = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(stored, dict) or stored.get("tracking_uri") != self.uri:
            return None
        try:
            run = self.client.get_run(str(stored["run_id"]))
        except Exception:  # deleted from the store, or never there
            return None
        return run.info.run_id if run.info.lifecycle_stage == "active" else None

    def _experiment(self, name: str) -> str:
        """The id of experiment ``name``, made (or restored) if needed."""
        found = self.client.get_experiment_by_name(name)
        if found is None:
            try:
                return str(self.client.create_experiment(name))
            except Exception:  # another process made it meanwhile
                found = self.client.get_experiment_by_name(name)
                if found is None:
                    raise
        if found.lifecycle_stage == "deleted":
            self.client.restore_experiment(found.experiment_id)
        return str(found.experiment_id)

    def _log_params(self, cfg: ExperimentConfig) -> None:
        from mlflow.entities import Param

        params = [
            Param(key, (v if isinstance(v, str) else json.dumps(v))[:_MAX_PARAM_CHARS])
            for key, v in flat_keys(cfg.to_dict()).items()
        ]
        for chunk in _chunks(params, _MAX_PARAMS):
            self.client.log_batch(self.run_id, params=chunk)

    def _log(self, step: int, values: Mapping[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(k, v, now, step) for k, v in values.items()]
        for chunk in _chunks(metrics, _MAX_METRICS):
            self.client.log_batch(self.run_id, metrics=chunk)

    def _close(self, finished: bool) -> None:
        final = self.run_dir / "final.json"
        if finished and final.is_file():
            self.client.log_artifact(self.run_id, str(final))
        self.client.set_terminated(self.run_id, "FINISHED" if finished else "FAILED")


def open_tracker(
    cfg: ExperimentConfig,
    run_dir: Path,
    labels: Mapping[str, Any],
    start: int,
    config_hash: str,
) -> Tracker:
    """The tracker of one run that starts (or resumes) at round ``start``.

    ``labels``: the run's method, target and seed; ``config_hash``: the run's
    (computed once per experiment, recorded with the run). A backend that cannot start
    logs a warning and the run goes on untracked.
    """
    backend = cfg.runtime.tracking
    if start == 1:  # a fresh run: no other backend's logs of an earlier attempt
        try:  # stay (a later --resume with that backend would continue them)
            if backend != "mlflow":
                (run_dir / MLFLOW_RUN).unlink(missing_ok=True)
            if backend != "tensorboard":
                for path in tensorboard_dir(cfg, run_dir, labels).glob(_EVENTS):
                    path.unlink(missing_ok=True)
        except OSError as err:
            log.warning("tracking: cannot remove an earlier attempt's logs: %s", err)
    if backend == "none":
        return NO_TRACKING
    kind = TensorBoardTracker if backend == "tensorboard" else MlflowTracker
    try:
        tracker: Tracker = kind(cfg, run_dir, labels, start, config_hash)
    except Exception as err:
        log.warning(
            "%s tracking could not start (the run goes on untracked): %s: %s",
            backend,
            type(err).__name__,
            err,
        )
        return NO_TRACKING
    results = run_dir / "results.jsonl"
    if tracker.fresh and start > 1 and results.is_file():
        # the tracker has none of the rounds up to the checkpoint: results.jsonl
        # (truncated to the checkpoint by the resume) has them
        from fedpath.utils.io import read_json_lines

        try:
            for record in read_json_lines(results, "run record").records:
                tracker.add(record)
        except (OSError, ValueError) as err:  # (DataError is a ValueError)
            log.warning("tracking: cannot read %s back: %s", results, err)
        tracker.commit(start - 1)
    return tracker
