"""fedpath's own subcommands, one module per family, each module holding the
parsers of its commands next to their handlers.

=======================  ==========================================================
:mod:`.run`              ``run``: one experiment config, every fold x seed
:mod:`.suite`            ``demo`` and ``suite`` (``ablate``): several methods, a table
:mod:`.table`            ``table``: run directories -> the papers' table
:mod:`.execute`          the cells of ``run``/``suite``/``demo``: serial or parallel
:mod:`.evaluate`         ``evaluate``: an exported model on a dataset, with metrics
:mod:`.predict`          ``predict`` and ``adapt-bn``: an exported model on images
:mod:`.info`             ``info``: a model file verified and its header printed
:mod:`.describe`         ``list``, ``check``, ``data``, ``audit``, ``stain-report``
:mod:`.common`           the console, ``--quiet``'s wording, the packaged configs
=======================  ==========================================================

:data:`fedpath.cli.COMMANDS` names every subcommand's module (these, and the
slide, Flower, FedHD-render, self-supervised and report ones that live with their
packages). Importing these modules loads no PyTorch: each handler imports what it
runs.
"""
