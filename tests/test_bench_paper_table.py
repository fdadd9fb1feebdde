"""``benchmarks/paper_table.py`` end to end on a stand-in with Camelyon17-WILDS's
on-disk layout (``metadata.csv`` + patch folders): the paper's suite runs, then
the table in the paper's layout and the paired comparison with FedAvg print."""

from __future__ import annotations

import importlib
from pathlib import Path

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


@pytest.mark.slow
def test_the_camelyon17_table_runs_and_prints_in_the_papers_layout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    base = write_wilds_tree(tmp_path / "data")
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    bench = importlib.import_module("paper_table")
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
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    bench = importlib.import_module("paper_table")
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
    images, anns = [], []
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
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
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
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    bench = importlib.import_module("paper_table")
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
