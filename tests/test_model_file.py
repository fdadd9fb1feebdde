"""The model-file container and the interface every kind of loaded model shares."""

from __future__ import annotations

import hashlib
import json
import logging
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from fedpath.errors import ArtifactError
from fedpath.evaluation.calibration import apply_temperature
from fedpath.model_file import (
    FORMAT,
    MAGIC,
    LoadedFile,
    model_kind,
    read_container,
    write_container,
)
from tests.model_file_helpers import seal_model_file


def _file(tmp_path: Path, header: dict[str, Any] | None = None) -> Path:
    torch.manual_seed(0)
    head = {"format": FORMAT, "class_names": ["a", "b"], **(header or {})}
    return write_container(tmp_path / "m.fpm", head, nn.Linear(3, 2))


def _parts(blob: bytes) -> tuple[dict[str, Any], bytes]:
    """The header of a file's bytes and its payload (the trailer cut off)."""
    n = struct.unpack("<Q", blob[len(MAGIC) : len(MAGIC) + 8])[0]
    head = json.loads(blob[len(MAGIC) + 8 : len(MAGIC) + 8 + n])
    return head, blob[len(MAGIC) + 8 + n : -32]


def test_the_container_round_trips_header_and_weights(tmp_path: Path) -> None:
    path = _file(tmp_path, {"kind": "mil", "note": "x"})
    blob = path.read_bytes()
    assert blob.startswith(MAGIC)
    assert blob[-32:] == hashlib.sha256(blob[:-32]).digest()
    header, weights = read_container(path)
    payload = _parts(blob)[1]
    assert header["note"] == "x" and header["payload_bytes"] == len(payload)
    assert header["payload_sha256"] == hashlib.sha256(payload).hexdigest()
    torch.manual_seed(0)
    want = nn.Linear(3, 2).state_dict()
    assert all(torch.equal(weights[k], want[k]) for k in want)
    assert model_kind(header) == "mil"
    assert model_kind({"format": 2}) == "image"  # every file before MIL export


def test_corrupt_truncated_and_incompatible_files(tmp_path: Path) -> None:
    blob = _file(tmp_path).read_bytes()
    bad = tmp_path / "flipped.fpm"
    bad.write_bytes(blob[:-10] + bytes([blob[-10] ^ 0xFF]) + blob[-9:])
    with pytest.raises(ArtifactError, match=r"flipped.fpm' is truncated or altered"):
        read_container(bad)
    cut = tmp_path / "cut.fpm"
    cut.write_bytes(blob[: len(blob) // 2])
    with pytest.raises(ArtifactError, match=r"cut.fpm' is truncated"):
        read_container(cut)
    junk = tmp_path / "junk.fpm"
    junk.write_bytes(b"PK\x03\x04 not a model")
    with pytest.raises(ArtifactError, match="not a fedpath model file"):
        read_container(junk)
    with pytest.raises(ArtifactError, match="does not exist"):
        read_container(tmp_path / "none.fpm")
    head, payload = _parts(blob)
    head["format"] = 99
    new_head = json.dumps(head).encode()
    future = tmp_path / "future.fpm"
    future.write_bytes(
        MAGIC + struct.pack("<Q", len(new_head)) + new_head + payload + blob[-32:]
    )
    with pytest.raises(ArtifactError, match="has format 99"):
        read_container(future)


def test_the_checksum_covers_the_header(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blob = _file(tmp_path).read_bytes()
    head, payload = _parts(blob)
    # reversed class names would silently invert every prediction
    head["class_names"] = head["class_names"][::-1]
    new = json.dumps(head, sort_keys=True).encode()
    swapped = tmp_path / "swapped.fpm"
    swapped.write_bytes(
        MAGIC + struct.pack("<Q", len(new)) + new + payload + blob[-32:]
    )
    with pytest.raises(ArtifactError, match=r"swapped.fpm' is truncated or altered"):
        read_container(swapped)
    # a format-1 file (payload checksum only) still loads, with a warning
    head["class_names"] = head["class_names"][::-1]
    head["format"] = 1
    old = json.dumps(head, sort_keys=True).encode()
    v1 = tmp_path / "v1.fpm"
    v1.write_bytes(MAGIC + struct.pack("<Q", len(old)) + old + payload)
    with caplog.at_level(logging.WARNING, logger="fedpath"):
        header, _ = read_container(v1)
    assert header["class_names"] == ["a", "b"]
    assert "format 1" in caplog.text


class _Meta:
    """The fields of :class:`fedpath.model_file.FileMeta`."""

    def __init__(
        self, classes: int, temperature: float | None, threshold: float | None
    ):
        self.class_names = [f"c{i}" for i in range(classes)]
        self.temperature = temperature
        self.threshold = threshold
        self.data: dict[str, Any] = {}

    @property
    def num_classes(self) -> int:
        return len(self.class_names)


class _Fixed(LoadedFile[_Meta]):
    """A loaded model whose probabilities are its inputs."""

    kind = "test"
    unit = "rows"

    def predict_proba(self, inputs: Any) -> np.ndarray:
        return self.calibrate(np.asarray(inputs, dtype=np.float64))


def test_calibrate_and_decide_apply_the_files_rule() -> None:
    probs = np.array([[0.7, 0.3], [0.45, 0.55], [0.2, 0.8]])
    plain = _Fixed(_Meta(2, None, None))
    assert plain.calibrate(probs) is probs
    assert plain.decide(probs).tolist() == [0, 1, 1]
    assert plain.predict(probs) == ["c0", "c1", "c1"]
    ruled = _Fixed(_Meta(2, 2.0, 0.6))
    assert ruled.decide(probs).tolist() == [0, 0, 1]  # p1 >= 0.6, not the argmax
    np.testing.assert_allclose(
        ruled.predict_proba(probs), apply_temperature(probs, 2.0)
    )
    assert (
        ruled.class_names == ["c0", "c1"] and ruled.class_names is not ruled.class_names
    )


def test_a_bad_decision_rule_or_weights_name_the_file(tmp_path: Path) -> None:
    where = tmp_path / "x.fpm"
    with pytest.raises(ArtifactError, match="x.fpm': temperature must be > 0"):
        _Fixed(_Meta(2, 0.0, None), where)
    with pytest.raises(ArtifactError, match="x.fpm': a threshold needs two classes"):
        _Fixed(_Meta(3, None, 0.5), where)
    loaded = _Fixed(_Meta(2, None, None), where)
    with pytest.raises(ArtifactError, match="x.fpm' does not fit a 3x2 layer"):
        loaded._fit(lambda: nn.Linear(3, 2), {"weight": torch.zeros(1)}, "a 3x2 layer")
    net = loaded._fit(lambda: nn.Linear(3, 2), nn.Linear(3, 2).state_dict(), "x")
    assert not net.training


def _sealed(path: Path, head_bytes: bytes, payload: bytes) -> Path:
    """A format-2 file around ``head_bytes`` with valid checksums (as a writer,
    not a tamperer, would produce it)."""
    path.write_bytes(seal_model_file(head_bytes, payload))
    return path


@pytest.mark.parametrize(
    ("head", "said"),
    [
        (b"[1, 2]", "the header is a JSON list"),
        (b"42", "the header is a JSON number"),
        (b'"x"', "the header is a JSON string"),
        (b'{"format": 2, "class', "truncated or corrupted"),
        (b"[" * 100_000, "truncated or corrupted"),  # nesting that overflows
        (b'{"format": true}', "has format True"),
    ],
)
def test_a_header_that_is_not_an_object_names_the_file(
    tmp_path: Path, head: bytes, said: str
) -> None:
    path = _sealed(tmp_path / "h.fpm", head, b"")
    with pytest.raises(ArtifactError, match=f"h.fpm'.*{said}"):
        read_container(path)


def test_a_header_longer_than_the_file_is_truncated(tmp_path: Path) -> None:
    path = tmp_path / "long.fpm"
    path.write_bytes(MAGIC + struct.pack("<Q", 10**12) + b"{}")
    with pytest.raises(ArtifactError, match="long.fpm' is truncated: its header"):
        read_container(path)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_weights_are_refused_naming_the_tensor(
    tmp_path: Path, bad: float
) -> None:
    net = nn.Linear(3, 2)
    with torch.no_grad():
        net.bias[1] = bad
    head = {"format": FORMAT, "class_names": ["a", "b"]}
    path = write_container(tmp_path / "nan.fpm", head, net)
    with pytest.raises(ArtifactError, match=r"nan.fpm': tensor 'bias' holds non-fin"):
        read_container(path)


def test_weights_that_are_not_named_tensors_are_refused(tmp_path: Path) -> None:
    import io

    buf = io.BytesIO()
    torch.save([torch.zeros(2)], buf)
    payload = buf.getvalue()
    head = {
        "format": FORMAT,
        "payload_bytes": len(payload),
        "payload_sha256": hashlib.sha256(payload).hexdigest(),
    }
    path = _sealed(tmp_path / "l.fpm", json.dumps(head).encode(), payload)
    with pytest.raises(ArtifactError, match="l.fpm': the weights are not a mapping"):
        read_container(path)


def test_a_folder_or_a_fifo_is_named_not_opened(tmp_path: Path) -> None:
    import os

    with pytest.raises(ArtifactError, match="'.*d.fpm' is a folder"):
        (tmp_path / "d.fpm").mkdir()
        read_container(tmp_path / "d.fpm")
    os.mkfifo(tmp_path / "f.fpm")  # opening it would block forever
    with pytest.raises(ArtifactError, match="f.fpm' is not a regular file"):
        read_container(tmp_path / "f.fpm")


def test_class_names_must_be_unique_non_empty_names(tmp_path: Path) -> None:
    for names in ([], ["a", "a"], ["a", ""], ["a", 3]):
        meta = _Meta(2, None, None)
        meta.class_names = names  # type: ignore[assignment]
        with pytest.raises(ArtifactError, match="x.fpm': class_names must be"):
            _Fixed(meta, tmp_path / "x.fpm")


def test_weights_holding_code_are_refused_in_one_line(tmp_path: Path) -> None:
    import io

    buf = io.BytesIO()
    torch.save({"w": torch.zeros(1), "x": _Meta(2, None, None)}, buf)  # an object
    payload = buf.getvalue()
    head = {
        "format": FORMAT,
        "payload_bytes": len(payload),
        "payload_sha256": hashlib.sha256(payload).hexdigest(),
    }
    path = _sealed(tmp_path / "code.fpm", json.dumps(head).encode(), payload)
    with pytest.raises(ArtifactError, match="code.fpm': the weights are not a te") as e:
        read_container(path)
    assert "\n" not in str(e.value) and "trust" not in str(e.value)
