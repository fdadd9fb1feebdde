"""A tiny unlabeled federation for the self-supervised tests (16 px, a few images)."""

from __future__ import annotations

from pathlib import Path

from fedpath.algorithms.base import ClientContext
from fedpath.config import ExperimentConfig, load_config
from fedpath.data.base import Split
from tests.fixtures import make_client_context

SSL_TINY = [
    "data.params.num_hospitals=3",
    "data.params.samples_per_hospital=32",
    "data.params.image_size=16",
    "data.params.slides_per_hospital=4",
    "model.params.widths=[4,8]",
    "train.rounds=1",
    "train.local_epochs=1",
    "train.batch_size=8",
    "train.eval_batch_size=64",
    "seeds=[0]",
    "runtime.threads=null",
    "runtime.export_model=false",
    "lodo.targets=[hospital_2]",
    "lodo.source_eval=false",
]


def ssl_cfg(tmp_path: Path, algorithm: str, *extra: str) -> ExperimentConfig:
    return load_config(
        None,
        [*SSL_TINY, f"output_dir={tmp_path}", f"algorithm.name={algorithm}", *extra],
    )


def client_ctx(
    cfg: ExperimentConfig, data: Split | None = None, rnd: int = 1, cid: str = "c0"
) -> ClientContext:
    """A client context on hospital_0's train split (or ``data``)."""
    return make_client_context(
        cfg=cfg, data=data, domain="hospital_0", client_id=cid, round=rnd
    )
