"""fedpath: federated domain generalization for computational pathology."""

__version__ = "0.1.0"
