"""A site's class names matched to a model's (:mod:`fedpath.inference.classes`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedpath.data.manifest import Records
from fedpath.errors import ConfigError, DataError
from fedpath.inference.classes import (
    match_class,
    parse_class_map,
    rename_records,
    renamed,
    resolve_classes,
)

CLASSES = ["normal", "tumour"]


def test_parse_class_map_takes_any_case_and_names_bad_entries() -> None:
    assert parse_class_map(" A=Normal , b=tumour,", CLASSES) == {
        "A": "normal",
        "b": "tumour",
    }
    assert parse_class_map(None, CLASSES) == {}
    with pytest.raises(ConfigError, match="no FOLDER=CLASS entry"):
        parse_class_map(",", CLASSES)
    with pytest.raises(ConfigError, match="entry 'A' is not FOLDER=CLASS"):
        parse_class_map("A", CLASSES)
    with pytest.raises(ConfigError, match="'A' is mapped twice"):
        parse_class_map("A=normal,A=tumour", CLASSES)
    with pytest.raises(ConfigError, match="'A=benign'.*its classes: normal, tumour"):
        parse_class_map("A=benign", CLASSES)


def test_match_class_prefers_the_map_then_the_name_then_its_case() -> None:
    assert match_class("N", CLASSES, {"n": "tumour"}) == "tumour"  # map key, any case
    assert match_class("normal", CLASSES, {}) == "normal"
    assert match_class("NORMAL", CLASSES, {}) == "normal"
    assert match_class("benign", CLASSES, {}) is None
    # two classes differing only in case: an exact name only
    assert match_class("a", ["a", "A"], {}) == "a"
    assert match_class("b", ["B1", "b1"], {}) is None


def test_resolve_classes_names_what_it_saw_and_expected() -> None:
    got = resolve_classes(["Normal", "T"], CLASSES, {"t": "tumour"}, "site", "labels")
    assert got == {"Normal": "normal", "T": "tumour"}
    with pytest.raises(DataError, match=r"site: labels \['x'\] are not classes"):
        resolve_classes(["x", "normal"], CLASSES, {}, "site", "labels")
    with pytest.raises(ConfigError, match=r"\['Z'\] name\(s\) none of the labels"):
        resolve_classes(["normal"], CLASSES, {"Z": "tumour"}, "site", "labels")


def test_rename_records_relabels_and_reports_the_changed_names() -> None:
    rec = Records([Path("a"), Path("b")], ["NORMAL", "tumour"], ["d", "d"], [], [])
    assert rename_records(rec, CLASSES, {}, "site", "labels") == {"NORMAL": "normal"}
    assert rec.labels == ["normal", "tumour"]
    assert renamed({"a": "a", "b": "c"}) == {"b": "c"}
