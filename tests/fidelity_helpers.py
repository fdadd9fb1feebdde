"""The ``yaml fidelity`` blocks of the fidelity ledgers (docs/fidelity/*.md), parsed."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

BLOCK = re.compile(r"```yaml fidelity\n(.*?)```", re.S)


def ledger_blocks(path: Path) -> list[dict[str, Any]]:
    return [yaml.safe_load(b) for b in BLOCK.findall(path.read_text("utf-8"))]
