"""Backbones (encoder h + classifier g) and, later, MIL models."""

from fedpath.models import efficientnet_lite, vit  # noqa: F401  (register backbones)
from fedpath.models.backbones import BACKBONES, FedModel, build_model

__all__ = ["BACKBONES", "FedModel", "build_model"]
