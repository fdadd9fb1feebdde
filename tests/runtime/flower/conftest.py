"""Shared by the tests of dp_fedavg over Flower (``test_central_dp*.py``)."""

from __future__ import annotations

DP = ["algorithm.name=dp_fedavg", "model.params.norm=group"]
