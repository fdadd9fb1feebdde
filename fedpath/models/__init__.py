"""Backbones (encoder h + classifier g) and, later, MIL models."""

from fedpath.models.backbones import BACKBONES, FedModel, build_model

__all__ = ["BACKBONES", "FedModel", "build_model"]
