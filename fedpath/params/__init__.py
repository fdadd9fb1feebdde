"""The parameter dataclasses of the registered objects, importable without PyTorch.

Every registered dataset, backbone, MIL model and algorithm may declare a params
dataclass (``data.params``, ``model.params``, ``algorithm.params``). They live
here, in modules that import no PyTorch, rather than beside the code that uses
them, so that validating a config (:func:`fedpath.config.load_config`,
``fedpath check``) never loads PyTorch: the registries find a params class
through ``fedpath/catalog.json`` (which records ``"module:QualName"``) without
importing the plugins. Each class is also importable from its old home
(``from fedpath.algorithms.fedstain import FedStainParams``); it is the same class.

- :mod:`.algorithms`: the image algorithms' params (``AlgorithmParams`` and its
  subclasses);
- :mod:`.mil_train`, :mod:`.mil_baselines`: the slide-bag (MIL) algorithms' params;
- :mod:`.models`: the image backbones' params;
- :mod:`.mil`: the MIL models' params;
- :mod:`.data`: the datasets' params.
"""
