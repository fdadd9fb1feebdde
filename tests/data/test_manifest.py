"""Manifest and folder datasets (fedpath.data.manifest): loading, splitting by
slide, bad input named by file and row, and every algorithm on them."""

from __future__ import annotations

import csv
import logging
from pathlib import Path

import numpy as np
import pytest

from fedpath.algorithms.base import ALGORITHMS
from fedpath.config import ConfigError, load_config
from fedpath.data.base import DataError
from fedpath.runtime.experiment import load_dataset, run_experiment
from tests.conftest import AMIBR
from tests.data.helpers import corrupt_one, small_manifest_config
from tests.fixtures import write_folder_tree, write_manifest_tree, write_wilds_tree


def manifest_cfg(root: Path, *extra: str):  # type: ignore[no-untyped-def]
    return load_config(
        None,
        [
            "data.name=manifest",
            f"data.root={root}",
            "data.params.image_size=32",
            *extra,
        ],
    )


def test_manifest_loads_resizes_and_splits_by_slide(tmp_path: Path) -> None:
    write_manifest_tree(tmp_path)
    ds = load_dataset(manifest_cfg(tmp_path).data)
    assert ds.domains == ["site0", "site1", "site2"]
    assert ds.classes == ["normal", "tumour"]
    assert ds.image_size == 32  # 40 px files resized like training does
    x = ds.split("site1", "all").load(np.arange(3))
    assert tuple(x.shape) == (3, 3, 32, 32)
    for d in ds.domains:
        tr, te = ds.split(d, "train"), ds.split(d, "test")
        assert len(te) and len(tr) and not set(tr.slides) & set(te.slides)
    lazy = load_dataset(manifest_cfg(tmp_path, "data.params.in_memory=false").data)
    assert np.array_equal(
        lazy.split("site1", "all").load(np.arange(3)).numpy(), x.numpy()
    )


def test_manifest_bad_input_names_file_and_row(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = write_manifest_tree(tmp_path)
    rows = list(csv.DictReader(path.open()))
    (tmp_path / rows[4]["path"]).unlink()  # row 6 of the file (header = row 1)
    with pytest.raises(
        DataError, match=r"manifest.csv:6: image file .* does not exist"
    ):
        load_dataset(manifest_cfg(tmp_path).data)
    with caplog.at_level(logging.WARNING, logger="fedpath"):
        ds = load_dataset(manifest_cfg(tmp_path, "data.params.skip_bad=true").data)
    assert len(ds.skipped) == 1 and "manifest.csv:6" in ds.skipped[0]
    assert "skipped 1 unreadable or missing images" in caplog.text
    write_manifest_tree(tmp_path)  # restore, then corrupt the next row
    (tmp_path / rows[5]["path"]).write_bytes(b"not a png")
    with pytest.raises(DataError, match=r"manifest.csv:7: cannot read image"):
        load_dataset(manifest_cfg(tmp_path, "data.params.in_memory=true").data)
    bad = tmp_path / "bad.csv"
    bad.write_text("path,label\nx.png,normal\n")
    with pytest.raises(DataError, match=r"found 2 column\(s\), lacking domain"):
        load_dataset(manifest_cfg(tmp_path, "data.params.path=bad.csv").data)
    with pytest.raises(DataError, match="label 'normal' is not one of the classes"):
        load_dataset(
            manifest_cfg(
                tmp_path, "data.params.classes=[a,b]", "data.params.skip_bad=true"
            ).data
        )
    with pytest.raises(ConfigError, match="data.root: dataset 'manifest' needs"):
        load_dataset(load_config(None, ["data.name=manifest"]).data)


def test_folder_layout(tmp_path: Path) -> None:
    write_folder_tree(tmp_path)
    ds = load_dataset(
        load_config(
            None,
            ["data.name=folder", f"data.root={tmp_path}", "data.params.image_size=32"],
        ).data
    )
    assert ds.domains == ["site0", "site1", "site2"]
    assert ds.counts()[0]["train/normal"] + ds.counts()[0]["test/normal"] == 6
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DataError, match="no images under"):
        load_dataset(load_config(None, ["data.name=folder", f"data.root={empty}"]).data)


def test_one_class_folder_scan_for_datasets_and_evaluation(tmp_path: Path) -> None:
    from fedpath.data.files import image_files
    from fedpath.data.manifest import Records, add_class_folders, scan_folders
    from fedpath.inference.images import scan_class_folders

    site = tmp_path / "root" / "site0"
    for cls in ("tumour", "normal"):
        (site / cls / "deeper").mkdir(parents=True)
        for name in ("b.PNG", "a.jpg", "notes.txt", "deeper/c.tif"):
            (site / cls / name).write_bytes(b"")
    flat = image_files(site / "tumour")
    assert [p.name for p in flat] == ["a.jpg", "b.PNG"]  # sorted, any suffix case
    deep = image_files(site / "tumour", recursive=True)
    assert [p.relative_to(site / "tumour").as_posix() for p in deep] == [
        "a.jpg",
        "b.PNG",
        "deeper/c.tif",
    ]
    rec = Records([], [], [], [], [])
    add_class_folders(rec, site, "site0")
    assert rec.labels == ["normal", "normal", "tumour", "tumour"]
    assert rec.domains == ["site0"] * 4 and rec.slides == [str(p) for p in rec.paths]
    # the dataset layout reads a class folder flat, fedpath evaluate at any depth
    assert scan_folders(tmp_path / "root").paths == rec.paths
    evaluated = scan_class_folders(site)
    assert len(evaluated.paths) == 6 and set(evaluated.domains) == {"site0"}
    assert evaluated.where == [str(p) for p in evaluated.paths]


@pytest.mark.skipif(not AMIBR.is_dir(), reason="FEDPATH_AMIBR (AMi-Br) is unset")
def test_real_amibr_loads_through_the_manifest_reader() -> None:
    ds = load_dataset(
        load_config(
            None,
            [
                "data.name=manifest",
                f"data.root={AMIBR}",
                "data.params.image_size=32",
                "data.params.classes=[normal,atypical]",
            ],
        ).data
    )
    assert len(ds.domains) == 4 and "TUPAC16" in ds.domains
    assert ds.labels.sum() == 105 + 127 + 172 + 428  # atypical crops
    for d in ds.domains:
        tr, te = ds.split(d, "train"), ds.split(d, "test")
        assert not set(tr.slides) & set(te.slides)


def file_overrides(kind: str, root: Path) -> list[str]:
    if kind == "manifest":
        write_manifest_tree(root)
        return ["data.name=manifest", f"data.root={root}", "lodo.targets=[site2]"]
    if kind == "folder":
        write_folder_tree(root)
        return ["data.name=folder", f"data.root={root}", "lodo.targets=[site2]"]
    write_wilds_tree(root)
    return [
        "data.name=camelyon17",
        f"data.root={root}",
        "lodo.targets=[hospital_4]",
        "partition.clients_per_domain=1",
        "data.params.in_memory=true",
    ]


@pytest.mark.parametrize("kind", ["manifest", "folder", "camelyon17"])
@pytest.mark.parametrize(
    "algorithm", [n for n in ALGORITHMS.names() if ALGORITHMS.get(n).data == "images"]
)
def test_every_algorithm_on_every_file_dataset(
    tmp_path: Path, kind: str, algorithm: str
) -> None:
    over = file_overrides(kind, tmp_path / "data")
    cfg = load_config(
        None,
        [
            *over,
            "data.params.image_size=32",
            f"algorithm.name={algorithm}",
            "model.params.widths=[8,16]",
            # dp_fedavg refuses BatchNorm running statistics that train
            f"model.params.norm={'group' if algorithm == 'dp_fedavg' else 'batch'}",
            "train.rounds=1",
            "train.batch_size=8",
            "seeds=[0]",
            f"output_dir={tmp_path / 'runs'}",
            "partition.min_client_size=2",
        ],
    )
    (record,) = run_experiment(cfg)
    assert 0 <= record["evaluation"]["target"]["accuracy"] <= 1


def test_data_root_from_an_environment_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_manifest_tree(tmp_path)
    cfg = manifest_cfg(Path("${FEDPATH_TEST_ROOT}"))  # validates without the variable
    monkeypatch.delenv("FEDPATH_TEST_ROOT", raising=False)
    with pytest.raises(ConfigError, match="environment variable FEDPATH_TEST_ROOT is"):
        load_dataset(cfg.data)
    monkeypatch.setenv("FEDPATH_TEST_ROOT", str(tmp_path))
    ds = load_dataset(cfg.data)
    assert ds.domains == ["site0", "site1", "site2"]
    # only ${NAME} is expanded; a literal path is left alone
    assert load_dataset(manifest_cfg(tmp_path).data).domains == ds.domains


def test_missing_data_says_where_to_get_it(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"does not exist .*docs/data/"):
        load_dataset(manifest_cfg(tmp_path).data)
    with pytest.raises(ConfigError, match=r"needs data.root.*docs/data/"):
        load_dataset(load_config(None, ["data.name=manifest"]).data)


def test_a_manifest_with_a_byte_order_mark_loads(tmp_path: Path) -> None:
    path = write_manifest_tree(tmp_path)
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())  # as Excel saves CSV
    assert len(load_dataset(small_manifest_config(tmp_path).data).domains) == 3


def test_a_listed_class_without_images_is_refused(tmp_path: Path) -> None:
    write_manifest_tree(tmp_path)
    cfg = small_manifest_config(
        tmp_path, "data.params.classes=[normal, tumour, necrosis]"
    )
    with pytest.raises(DataError, match=r"class\(es\) \['necrosis'\] .* have no image"):
        load_dataset(cfg.data)


def test_lazy_loading_with_skip_bad_checks_every_image_first(tmp_path: Path) -> None:
    where = corrupt_one(tmp_path)
    cfg = small_manifest_config(
        tmp_path, "data.params.in_memory=false", "data.params.skip_bad=true"
    )
    ds = load_dataset(cfg.data)
    assert len(ds.skipped) == 1 and where in ds.skipped[0]
    assert sum(len(ds.split(d, "all")) for d in ds.domains) == 47


def test_a_manifest_that_is_not_utf8_names_the_byte_and_the_fix(
    tmp_path: Path,
) -> None:
    path = write_manifest_tree(tmp_path)
    path.write_bytes(path.read_bytes().replace(b"site0", b"s\xe9te0", 1))
    with pytest.raises(
        DataError,
        match=r"manifest '.*manifest.csv': not UTF-8 text \(byte 0xe9 at offset "
        r"\d+\); save it as UTF-8",
    ):
        load_dataset(manifest_cfg(tmp_path).data)


def test_a_file_that_is_no_manifest_is_described_without_its_content(
    tmp_path: Path,
) -> None:
    passwd = tmp_path / "passwd"
    passwd.write_text("root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1::/:/bin/sh\n")
    with pytest.raises(DataError) as err:
        load_dataset(manifest_cfg(tmp_path, f"data.params.path={passwd}").data)
    msg = str(err.value)
    assert "passwd" in msg and "path, label, domain" in msg
    assert "found 1 column(s), lacking path, label, domain" in msg
    assert "root:" not in msg and "bash" not in msg and "daemon" not in msg


def test_an_image_listed_twice_is_an_error_naming_both_rows(tmp_path: Path) -> None:
    path = write_manifest_tree(tmp_path)
    rows = path.read_text().splitlines()
    path.write_text("\n".join([*rows, rows[3]]) + "\n")  # row 4 again, as row 50
    with pytest.raises(
        DataError,
        match=r"manifest.csv:4 and .*manifest.csv:50 list the same image "
        r"'.*site0/2.png' \(domain 'site0'\)",
    ):
        load_dataset(manifest_cfg(tmp_path).data)


def test_an_image_in_a_training_and_the_held_out_domain_is_a_leak(
    tmp_path: Path,
) -> None:
    path = write_manifest_tree(tmp_path)
    with path.open("a") as fh:  # a ".." path: resolved before comparing
        fh.write("imgs/site2/../site0/2.png,normal,site2,s7\n")
    with pytest.raises(
        DataError,
        match=r"image '.*imgs/site0/2.png' is listed under domain 'site0' "
        r"\(.*manifest.csv:4\) and domain 'site2' \(.*manifest.csv:50\)",
    ):
        load_dataset(manifest_cfg(tmp_path).data)


def test_a_symlink_into_another_domains_folder_is_a_leak(tmp_path: Path) -> None:
    write_folder_tree(tmp_path)
    src = sorted((tmp_path / "site0" / "normal").iterdir())[0]
    (tmp_path / "site2" / "normal" / "copy.png").symlink_to(src)
    cfg = ["data.name=folder", f"data.root={tmp_path}", "data.params.image_size=32"]
    with pytest.raises(DataError, match=r"domain 'site0' .* and domain 'site2'"):
        load_dataset(load_config(None, cfg).data)


def _with_agreement(root: Path, share: str | None = None) -> None:
    """Add an ``agreement`` column to root/manifest.csv: 2/3 on every third row
    (1.0 on the others), or ``share`` on every row."""
    path = root / "manifest.csv"
    rows = list(csv.DictReader(path.open()))
    for i, row in enumerate(rows):
        row["agreement"] = share or ("0.6667" if i % 3 == 0 else "1.0")
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def test_the_agreement_column_becomes_each_samples_soft_target(tmp_path: Path) -> None:
    write_manifest_tree(tmp_path)
    _with_agreement(tmp_path)
    plain = load_dataset(manifest_cfg(tmp_path).data)
    assert plain.store.soft_targets is None  # not asked for: not read
    ds = load_dataset(manifest_cfg(tmp_path, "data.params.agreement=agreement").data)
    soft = ds.store.soft_targets
    assert soft is not None and soft.shape == (len(ds.labels), 2)
    rows = list(csv.DictReader((tmp_path / "manifest.csv").open()))
    for i, row in enumerate(rows):  # the store keeps the manifest's order
        share = float(row["agreement"])
        label = ds.classes.index(row["label"])
        assert ds.labels[i] == label
        assert soft[i, label] == pytest.approx(share)
        assert soft[i, 1 - label] == pytest.approx(1 - share)


def test_a_missing_or_bad_agreement_is_named(tmp_path: Path) -> None:
    write_manifest_tree(tmp_path)
    asked = manifest_cfg(tmp_path, "data.params.agreement=agreement").data
    with pytest.raises(DataError, match="has no column 'agreement'"):
        load_dataset(asked)
    _with_agreement(tmp_path, share="1.5")
    with pytest.raises(DataError, match=r"manifest.csv:2: column 'agreement' .* '1.5'"):
        load_dataset(asked)
    folder = tmp_path / "folder"
    write_folder_tree(folder)
    cfg = load_config(
        None, ["data.name=folder", f"data.root={folder}", "data.params.agreement=votes"]
    )
    with pytest.raises(ConfigError, match="data.params.agreement': dataset 'folder'"):
        load_dataset(cfg.data)
