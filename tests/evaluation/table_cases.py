"""Result rows shared by the table tests: accuracies per (method, target, seed)."""

from __future__ import annotations

from fedpath.evaluation.tables import ResultRow

# accuracy (fraction) per (method, target, seed); FedAvg has a seed (2) that
# misses target "B", and FedStain has no result at all on target "C".
RAW: dict[tuple[str, str], dict[int, float]] = {
    ("FedAvg", "B"): {0: 0.80, 1: 0.84},
    ("FedAvg", "A"): {0: 0.90, 1: 0.86, 2: 0.80},
    ("FedAvg", "C"): {0: 0.70, 1: 0.74, 2: 0.72},
    ("FedStain", "A"): {0: 0.95},
    ("FedStain", "B"): {0: 0.85},
}


def make_rows(raw: dict[tuple[str, str], dict[int, float]]) -> list[ResultRow]:
    return [
        ResultRow(method, target, seed, {"accuracy": value, "auroc": value / 2})
        for (method, target), seeds in raw.items()
        for seed, value in seeds.items()
    ]
