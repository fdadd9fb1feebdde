"""What several of fedpath's own subcommands share: ``--quiet`` as they word it,
their console, the packaged configs, comma-separated subsets and the error of a
``--metric`` the runs lack."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from fedpath.schema import ConfigError
from fedpath.utils.cli_args import add_quiet

if TYPE_CHECKING:
    from fedpath.evaluation.tables import ResultRow

#: ``--quiet`` of the commands that train or score (run, demo, suite, table,
#: evaluate, predict, adapt-bn).
QUIET_HELP = (
    "no progress bars or status lines (also FEDPATH_QUIET=1); tables and "
    "errors still print. Progress is bars on a terminal, timestamped lines "
    "otherwise (FEDPATH_PROGRESS=bars|lines|none to choose)"
)

#: ``--skip-bad`` of the commands that read a site's images.
SKIP_BAD_HELP = "skip (and count) unreadable images instead of failing"


def add_common(parser: argparse.ArgumentParser) -> None:
    """The options every training or scoring command takes (``--quiet``)."""
    add_quiet(parser, QUIET_HELP)


def console(quiet: bool) -> Console:
    """The console of a command's status lines (silent when ``quiet``)."""
    return Console(quiet=quiet, soft_wrap=True)


def packaged_config(name: str) -> Path:
    """The path of ``fedpath/configs/<name>.yaml``."""
    return Path(str(resources.files("fedpath") / "configs" / f"{name}.yaml"))


def only(text: str | None) -> list[str] | None:
    """The names of a comma-separated ``--only``/``--methods`` (None: all)."""
    return [m.strip() for m in text.split(",") if m.strip()] if text else None


def no_such_metric(metric: str, split: str, rows: Sequence[ResultRow]) -> None:
    """Fail naming the numeric metrics that the runs do have on ``split``."""
    have = sorted(
        {
            k
            for r in rows
            for k, v in r.metrics.items()
            if isinstance(v, int | float) and k != "n"
        }
    )
    listed = (
        f"expected one of {', '.join(have)}"
        if have
        else "these runs recorded no numeric metric for this split"
    )
    raise ConfigError(
        f"--metric: {metric!r} is not among these runs' metrics on --split "
        f"{split}; {listed}"
    )
