"""``benchmarks/paper_table.py`` end to end on a stand-in with Camelyon17-WILDS's
on-disk layout (``metadata.csv`` + patch folders): the paper's suite runs, then
the table in the paper's layout and the paired comparison with FedAvg print."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from tests.fixtures import write_wilds_tree

ROOT = Path(__file__).resolve().parents[1]
TINY = [
    "model.backbone=small_cnn",
    "model.params={widths: [8]}",
    "data.params.image_size=32",
    "data.params.workers=1",
    "train.rounds=1",
    "train.local_epochs=1",
    "seeds=[0,1]",
    "partition.clients_per_domain=1",
    "lodo.targets=[hospital_0,hospital_1]",
    "runtime.threads=null",
]


@pytest.fixture
def bench(benchmark_script: Callable[[str], ModuleType]) -> ModuleType:
    """``benchmarks/paper_table.py`` as a module."""
    return benchmark_script("paper_table")


@pytest.mark.slow
def test_the_camelyon17_table_runs_and_prints_in_the_papers_layout(
    tmp_path: Path, bench: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    base = write_wilds_tree(tmp_path / "data")
    argv = [
        "fedstain-camelyon17",
        f"data.root={base}",
        f"output_dir={tmp_path / 'runs'}",
        *TINY,
        "--only",
        "fedavg,fedstain",
    ]
    assert bench.main(argv) == 0
    out = capsys.readouterr().out
    assert "FedStain Table III (Camelyon17-WILDS, ResNet-18): accuracy" in out
    table = [line for line in out.splitlines() if line.startswith("|")]
    assert "hospital_0" in table[0] and "hospital_1" in table[0] and "Avg" in table[0]
    assert any(line.startswith("| fedavg") for line in table)
    assert "paired with fedavg over (held-out domain, seed) units" in out
    assert len(list((tmp_path / "runs").rglob("final.json"))) == 8  # 2 x 2 x 2
    # resumable: the second call runs nothing and prints the same table
    assert bench.main(argv) == 0
    again = capsys.readouterr().out
    assert [x for x in again.splitlines() if x.startswith("|")][: len(table)] == table


def test_an_unknown_table_is_refused_with_the_list(
    bench: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        bench.main(["fedstain-tcga"])
    assert "fedstain-camelyon17" in capsys.readouterr().err


def _midog_standin(root: Path) -> Path:
    """Six MIDOG 2021 slides (two per labelled scanner: 001-002, 051-052,
    101-102), each a pyramidal TIFF with four drawn figures, and MIDOG's
    COCO-style JSON."""
    import json

    from tests.wsi.helpers import he_image, write_slide

    w, h = 1000, 800
    figures = [(150, 150), (400, 300), (250, 600), (520, 520)]
    images: list[dict[str, object]] = []
    anns: list[dict[str, object]] = []
    for slide in (1, 2, 51, 52, 101, 102):
        write_slide(
            root / f"{slide:03d}.tiff", he_image(w, h, slide, figures), levels=2
        )
        images.append(
            {"id": slide, "file_name": f"{slide:03d}.tiff", "width": w, "height": h}
        )
        for cx, cy in figures:
            box = [cx - 25.0, cy - 25.0, cx + 25.0, cy + 25.0]
            anns.append(
                {"id": len(anns) + 1, "image_id": slide, "bbox": box, "category_id": 1}
            )
    cats = [{"id": 1, "name": "mitotic figure"}, {"id": 2, "name": "hard negative"}]
    path = root / "MIDOG.json"
    path.write_text(
        json.dumps({"images": images, "annotations": anns, "categories": cats})
    )
    return path


@pytest.mark.slow
def test_the_mvmidog_table_runs_from_midog_json_and_tiffs(
    tmp_path: Path, bench: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    from fedpath.cli import main as fedpath

    slides = tmp_path / "midog"
    slides.mkdir()
    ann = _midog_standin(slides)
    built = tmp_path / "mvmidog"
    argv = [
        "mvmidog",
        str(ann),
        str(slides),
        "-o",
        str(built),
        "--negatives-per-slide",
        "4",
    ]
    assert fedpath([*argv, "--no-imposters", "-q"]) == 0
    tiny = [t for t in TINY if not t.startswith("lodo.")]
    code = bench.main(
        [
            "fedstain-mvmidog",
            f"data.root={built}",
            f"output_dir={tmp_path / 'runs'}",
            *tiny,
            "seeds=[0]",
            "--only",
            "fedavg",
        ]
    )
    assert code == 0
    out = capsys.readouterr().out
    assert "FedStain Table IV (MvMidog, ResNet-18): accuracy" in out
    head = next(x for x in out.splitlines() if x.startswith("| Method"))
    assert all(d in head for d in ("hamamatsu_xr", "hamamatsu_s360", "aperio_cs2"))


def _clam_folder(root: Path, dim: int, seed: int) -> Path:
    """A CLAM feature folder: ``h5_files/<slide_id>.h5`` ('features' and
    'coords', as CLAM's extract_features_fp.py writes them) and a slides.csv
    naming CAMELYON16's two centres; a tumour slide holds a few patches moved
    along one direction of this extractor's space."""
    import h5py
    import numpy as np

    rng = np.random.default_rng(seed)
    direction = rng.normal(size=dim)
    (root / "h5_files").mkdir(parents=True)
    rows = ["slide_id,label,domain"]
    for domain in ("radboud", "utrecht"):
        for i in range(10):
            label = "tumor" if i % 2 else "normal"
            feats = rng.normal(size=(24, dim)).astype(np.float32)
            if label == "tumor":
                feats[:4] += 3.0 * direction.astype(np.float32)
            sid = f"{domain}_{i:03d}"
            with h5py.File(root / "h5_files" / f"{sid}.h5", "w") as fh:
                fh["features"] = feats
                fh["coords"] = np.stack([np.arange(24) * 256, np.zeros(24)], 1)
            rows.append(f"{sid},{label},{domain}")
    (root / "slides.csv").write_text("\n".join(rows) + "\n")
    return root


@pytest.mark.slow
def test_the_fedhd_table_runs_from_clam_h5_folders(
    tmp_path: Path, bench: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two extractors' CLAM folders (16-d and 24-d), CLAM-SB at one centre and
    TransMIL at the other: FedHD and its FedWSIDD reading run, then the clients x
    methods table and FedHD paired with FedWSIDD over (hospital, seed) units."""
    r50 = _clam_folder(tmp_path / "r50", 16, 0)
    uni = _clam_folder(tmp_path / "uni", 24, 1)
    argv = [
        "fedhd-camelyon16",
        f"data.root={r50}",
        f"algorithm.params.features.utrecht.root={uni}",
        f"output_dir={tmp_path / 'runs'}",
        "seeds=[0,1]",
        "train.local_epochs=8",
        "train.lr=0.005",
        "algorithm.params.t0=4",
        "algorithm.params.components=2",
        "algorithm.params.tokens=8",
        "algorithm.params.iters=5",
        "algorithm.params.model_params={clam_sb: {hidden: 16, attn_dim: 8}, "
        "transmil: {hidden: 16, heads: 2, landmarks: 4}}",
        "runtime.threads=null",
        "--only",
        "fedwsidd,fedhd",
    ]
    assert bench.main(argv) == 0
    out = capsys.readouterr().out
    title = "FedHD main table (CAMELYON16, [extractor + MIL] per hospital)"
    assert f"{title}: accuracy" in out and f"{title}: mcc" in out
    head = next(x for x in out.splitlines() if x.startswith("| Method"))
    assert "radboud" in head and "utrecht" in head and "Avg" in head
    assert "paired with fedwsidd over (hospital, seed) units" in out
    rows = [x for x in out.splitlines() if x.startswith("| fedhd ")]
    assert all("| 4 |" in r for r in rows[-2:])  # compared: 2 hospitals x 2 seeds
    assert len(list((tmp_path / "runs").rglob("final.json"))) == 4  # 2 methods x 2


@pytest.mark.slow
def test_the_fedad_table_probes_an_unseen_hospital_from_two_others(
    tmp_path: Path, bench: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    """FedAD Table 6 on a WILDS-layout stand-in: self-supervised training on
    hospitals 3 and 4 only, the probe fitted on hospitals 0 and 1 and tested on
    hospital 2; F1, precision, recall and AUROC, each paired with FedAvg-SSL."""
    base = write_wilds_tree(tmp_path / "data", per_center=12, mixed=True)
    tiny = [t for t in TINY if not t.startswith("lodo.")]
    argv = [
        "fedad-camelyon17",
        f"data.root={base}",
        f"output_dir={tmp_path / 'runs'}",
        *tiny,
        "train.clients_per_round=2",
        "train.batch_size=8",
        "evaluation.probe_folds=2",
        "--only",
        "fedavg_ssl,fedad",
    ]
    assert bench.main(argv) == 0
    out = capsys.readouterr().out
    for metric in ("f1", "precision", "recall", "auroc"):
        assert f"linear probe at the unseen hospital): {metric} (%)" in out
        assert f"{metric}: paired with fedavg_ssl over (held-out domain" in out
    head = next(x for x in out.splitlines() if x.startswith("| Method"))
    assert "hospital_2" in head and "hospital_0" not in head
    finals = list((tmp_path / "runs").rglob("final.json"))
    assert len(finals) == 4  # 2 methods x 2 seeds, one held-out hospital
    for final in finals:  # only hospitals 3 and 4 trained; 0 and 1 fitted the probe
        run = final.parent
        lines = (run / "traffic.jsonl").read_text().splitlines()
        trained = {json.loads(x)["client"].split("/")[0] for x in lines}
        assert trained == {"hospital_3", "hospital_4"}
        probe = json.loads(final.read_text())["evaluation"]["target"]
        assert probe["probe_train"] == ["hospital_0", "hospital_1"]
