"""Small datasets and manifest configs shared by the data tests."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from fedpath.config import load_config
from fedpath.data.base import DomainDataset, TensorStore, assign_test_split
from tests.fixtures import write_manifest_tree


def small_manifest_config(root: Path, *extra: str):  # type: ignore[no-untyped-def]
    return load_config(
        None,
        [
            "data.name=manifest",
            f"data.root={root}",
            "data.params.image_size=32",
            *extra,
        ],
    )


def corrupt_one(tmp_path: Path) -> str:
    path = write_manifest_tree(tmp_path)
    rows = list(csv.DictReader(path.open()))
    bad = tmp_path / rows[5]["path"]
    bad.write_bytes(bad.read_bytes()[:40])  # a truncated PNG
    return f"manifest.csv:{5 + 2}"


def toy_dataset(
    per_domain: int = 20, domains: int = 3, slides_per_domain: int = 5
) -> DomainDataset:
    import torch

    n = per_domain * domains
    images = torch.zeros(n, 3, 16, 16, dtype=torch.uint8)
    dom = np.repeat([f"d{i}" for i in range(domains)], per_domain)
    slides = np.array([f"{d}/s{i % slides_per_domain}" for i, d in enumerate(dom)])
    y = np.arange(n) % 2
    is_test = assign_test_split(dom, slides, 0.3, seed=0)
    return DomainDataset(
        "toy", TensorStore(images), ["a", "b"], y, dom, slides, is_test
    )


def png_header_only(width: int, height: int) -> bytes:
    """A PNG that declares ``width`` x ``height`` px and holds no pixel data: a
    decompression bomb's header, a few dozen bytes on disk."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = struct.pack(">I", zlib.crc32(kind + data))
        return struct.pack(">I", len(data)) + kind + data + crc

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit RGB
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + chunk(b"IDAT", zlib.compress(b""))
        + chunk(b"IEND", b"")
    )
