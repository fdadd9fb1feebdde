"""The AMi-Br table's columns, domains and crop settings, importable without numpy.

:mod:`fedpath.wsi.cli` registers ``fedpath amibr`` from these at ``fedpath
--help`` time; the builder itself is :mod:`.amibr`.
"""

from __future__ import annotations

#: columns of the AMi-Br table the builder reads (the expert votes are not needed)
REQUIRED_COLUMNS = ("slide", "dataset", "uid", "x", "y", "majority_atypical")
#: columns of the manifest, in this order; ``agreement``: the share of the
#: experts whose vote matches the label (``data.params.agreement``; empty when
#: the table has no ``expert<k>_atypical`` columns)
MANIFEST_FIELDS = ("path", "label", "domain", "slide", "majority_atypical", "agreement")
#: the classes (and patch folders), in manifest order
LABELS = ("normal", "atypical")
MIDOG, TUPAC = "MIDOG21", "TUPAC16"
DATASETS = (MIDOG, TUPAC)
#: MIDOG 2021 training set: image number ranges per scanner (Aubreville et al.,
#: Med. Image Anal. 2023). 151-200 (Leica GT450) are unlabelled in MIDOG 2021.
MIDOG21_DOMAINS: tuple[tuple[int, int, str], ...] = (
    (1, 50, "MIDOG21_HamamatsuXR"),
    (51, 100, "MIDOG21_HamamatsuS360"),
    (101, 150, "MIDOG21_AperioCS2"),
)
MIDOG21_UNLABELLED = (151, 200)
TUPAC16_DOMAIN = "TUPAC16"
#: every domain, in summary order
DOMAINS = (*(d for _, _, d in MIDOG21_DOMAINS), TUPAC16_DOMAIN)

DEFAULT_SIZE = 128
MIN_SIZE = 16
#: fill of the crop pixels that lie outside the image
PAD_FILLS = {"white": 255, "black": 0}
DEFAULT_PAD = "black"  # as the crops fedpath's AMi-Br results were measured on
