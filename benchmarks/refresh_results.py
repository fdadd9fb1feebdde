"""Rewrite the results blocks of ``docs/reproduction.md`` from their units.

Every block on the page of the form

    ```text
    $ fedpath table docs/results/<file>.csv ...
    <what it printed>
    ```

(``table`` or ``compare``) is run again from the repository root and its
output replaces the block's, so that after units are added to a file in
``docs/results/`` (``fedpath table docs/results/F.csv runs/.../<row> --units
docs/results/F.csv``) one command brings the page level with them. The prose
around the blocks is left to the writer. ``tests/docs/test_results.py`` checks
that the page equals what this script would write.

Usage (from the repository root)::

    python benchmarks/refresh_results.py            # rewrite the page
    python benchmarks/refresh_results.py --check    # exit 1 if it is stale
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "reproduction.md"
#: a ```text block that starts with a fedpath command over a units file
BLOCK = re.compile(
    r"(```text\n\$ (fedpath (?:table|compare) docs/results/[^\n]*)\n)(.*?)(```)", re.S
)


def printed(command: str, root: Path = ROOT) -> str:
    """What ``command`` (``fedpath ...``) prints, run from ``root``."""
    from fedpath.cli import main

    out = io.StringIO()
    with contextlib.chdir(root), contextlib.redirect_stdout(out):
        code = main(shlex.split(command)[1:])
    if code != 0:
        raise SystemExit(f"{command!r} exited {code}")
    return out.getvalue().strip() + "\n"


def refreshed(text: str, root: Path = ROOT) -> str:
    """``text`` (the page) with every results block's output rerun."""

    def one(m: re.Match[str]) -> str:
        return m.group(1) + printed(m.group(2), root) + m.group(4)

    return BLOCK.sub(one, text)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--page", type=Path, default=PAGE, help="the page to refresh")
    p.add_argument(
        "--check", action="store_true", help="only say whether the page is stale"
    )
    args = p.parse_args(argv)
    old = args.page.read_text(encoding="utf-8")
    blocks = len(BLOCK.findall(old))
    if not blocks:
        what = "`$ fedpath table|compare docs/results/` block"
        raise SystemExit(f"{args.page}: no {what}")
    new = refreshed(old)
    stale = new != old
    if args.check:
        print(f"{args.page}: {blocks} blocks, {'stale' if stale else 'up to date'}")
        return int(stale)
    if stale:
        args.page.write_text(new, encoding="utf-8")
    print(f"{args.page}: {blocks} blocks, {'rewritten' if stale else 'unchanged'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
