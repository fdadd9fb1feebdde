"""The AMi-Br table read and checked (fedpath.wsi.amibr_annotations).

The builder's handling of bad rows (raise or count with ``skip_bad``) is tested
through ``build_amibr`` in ``test_amibr.py``; these tests read tables directly.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fedpath.errors import DataError
from fedpath.wsi.amibr_annotations import Figure, midog21_domain, read_annotations

HEADER = "slide,dataset,uid,x,y,expert1_atypical,majority_atypical"


def write(tmp_path: Path, *rows: str, header: str = HEADER) -> Path:
    path = tmp_path / "AMI-BR.csv"
    path.write_text("\n".join([header, *rows]) + "\n")
    return path


@pytest.mark.parametrize(
    ("slide", "domain"),
    [
        ("001.tiff", "MIDOG21_HamamatsuXR"),
        ("050.tiff", "MIDOG21_HamamatsuXR"),
        ("051.tiff", "MIDOG21_HamamatsuS360"),
        ("100.tif", "MIDOG21_HamamatsuS360"),
        ("101.tiff", "MIDOG21_AperioCS2"),
        ("150.tiff", "MIDOG21_AperioCS2"),
    ],
)
def test_midog21_domain_by_image_number(slide: str, domain: str) -> None:
    assert midog21_domain(slide) == domain


@pytest.mark.parametrize(
    ("slide", "message"),
    [
        ("151.tiff", "Leica GT450 image"),
        ("200.tiff", "Leica GT450 image"),
        ("201.tiff", "number 201 is outside MIDOG 2021's 001-200"),
        ("x01.tiff", "expected a MIDOG 2021 image name"),
    ],
)
def test_midog21_domain_refuses_other_images(slide: str, message: str) -> None:
    with pytest.raises(DataError, match=message):
        midog21_domain(slide)


def test_rows_become_figures(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "002.tiff,MIDOG21,6,200.9,150,False,False",
        " 24.tif ,TUPAC16,a-1.b,0,7.0,True,TRUE",
        "120.tiff,MIDOG21,7,3,4,False,0",
    )
    figs = read_annotations(path)
    assert figs[0] == Figure(2, "002.tiff", "MIDOG21", "6", 200, 150, False,
                             "MIDOG21_HamamatsuXR", 1.0)  # fmt: skip
    assert figs[0].label == "normal"
    assert figs[0].path == "patches/normal/MIDOG21_6.png"
    # values are stripped, flags case-free, TUPAC16 is one domain
    assert (figs[1].slide, figs[1].uid, figs[1].y) == ("24.tif", "a-1.b", 7)
    assert figs[1].atypical and figs[1].domain == "TUPAC16"
    assert figs[1].path == "patches/atypical/TUPAC16_a-1.b.png"
    assert figs[2].line == 4 and not figs[2].atypical


def test_the_experts_votes_give_each_figures_agreement(tmp_path: Path) -> None:
    votes = "expert1_atypical,expert2_atypical,expert3_atypical"
    header = f"slide,dataset,uid,x,y,{votes},majority_atypical"
    path = write(
        tmp_path,
        "002.tiff,MIDOG21,1,1,1,True,True,True,True",
        "002.tiff,MIDOG21,2,1,1,True,False,True,True",
        "002.tiff,MIDOG21,3,1,1,True,False,False,False",
        header=header,
    )
    assert [f.agreement for f in read_annotations(path)] == [1.0, 2 / 3, 2 / 3]
    no_votes = write(tmp_path, "002.tiff,MIDOG21,1,1,1,True", header=HEADER.replace(
        "expert1_atypical,", ""))  # fmt: skip
    assert read_annotations(no_votes)[0].agreement is None
    path = write(
        tmp_path, "002.tiff,MIDOG21,1,1,1,True,False,False,True", header=header
    )
    with pytest.raises(
        DataError, match=r"majority_atypical is 'True' but 1 of 3 expert"
    ):
        read_annotations(path)
    path = write(
        tmp_path, "002.tiff,MIDOG21,1,1,1,yes,False,False,False", header=header
    )
    with pytest.raises(DataError, match=r"column 'expert1_atypical' is 'yes'"):
        read_annotations(path)


def test_bad_rows_are_listed_when_asked(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "002.tiff,MIDOG21,6,1,1,False,False",
        "002.tiff,MIDOG21,6,2,2,True,True",  # the same (dataset, uid) again
        "002.tiff,MIDOG21,8,1,inf,False,False",
        "003.tiff,MIDOG21,9,1,1,False,False",
    )
    with pytest.raises(DataError, match=r"line 3: MIDOG21 uid 6 is also on line 2"):
        read_annotations(path)
    bad: list[str] = []
    figs = read_annotations(path, bad)
    assert [f.uid for f in figs] == ["6", "9"]
    assert len(bad) == 2 and "line 3" in bad[0]
    assert "line 4: column 'y' is 'inf'" in bad[1]


def test_unreadable_tables(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="cannot read it"):
        read_annotations(tmp_path / "absent.csv")
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(DataError, match=r"missing column\(s\).*no header line"):
        read_annotations(empty)
    binary = tmp_path / "binary.csv"
    binary.write_bytes(HEADER.encode() + b"\n\xff\xfe\x00,\x80\n")
    with pytest.raises(DataError, match="not a readable CSV table"):
        read_annotations(binary)


def test_a_file_that_is_no_table_is_described_without_its_content(
    tmp_path: Path,
) -> None:
    other = tmp_path / "passwd"
    other.write_text("zebra:x:0:0:zebra:/home/zebra:/bin/bash\n")
    with pytest.raises(DataError, match=r"missing column.*found 1 column") as err:
        read_annotations(other)
    assert "zeb" not in str(err.value)
