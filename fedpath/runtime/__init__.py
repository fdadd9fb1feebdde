"""Runtimes: the local training loop, the in-process federation, experiments."""
