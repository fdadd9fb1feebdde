"""The run's traffic audit: what each client received and sent, per stage.

Every stage of every round appends one line per client to ``traffic.jsonl``
(the ``[group, name, dtype, shape, bytes]`` of each array, never the values;
read back by ``fedpath audit``, :mod:`fedpath.runtime.audit`), and each reply is
checked as a node's policy checks it, with no caps: no reply may be
image-shaped unless the algorithm is a pooled, non-private one. Both runtimes
audit the same way, so their ``traffic.jsonl`` are equal.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from fedpath.config import ExperimentConfig
from fedpath.runtime.persistence import TRAFFIC
from fedpath.types import Payload
from fedpath.utils.io import append_jsonl


class TrafficAudit:
    """Appends a run's ``traffic.jsonl`` and checks every reply (module docstring).

    Parameters
    ----------
    image_size
        The dataset's image size (None: not an image dataset), for the check
        that no reply carries images.
    """

    def __init__(
        self, run_dir: Path, cfg: ExperimentConfig, image_size: int | None
    ) -> None:
        self.path = run_dir / TRAFFIC
        self.cfg = cfg
        self.image_size = image_size

    def record(
        self,
        stage: str,
        rnd: int,
        messages: Mapping[str, Payload],
        replies: Mapping[str, Payload],
        sent: Sequence[str],
    ) -> None:
        """One stage: the clients ``sent`` ``messages`` and those that replied.

        Raises
        ------
        PolicyError
            When a reply is image-shaped and the algorithm is not a pooled,
            non-private baseline (the node policy's reply check).
        """
        from fedpath.runtime.audit import manifest
        from fedpath.runtime.guard import audit_policy, check_reply

        policy = audit_policy(self.cfg.algorithm.name)
        for cid in sorted(set(sent) | set(replies)):
            down = messages.get(cid)
            up = replies.get(cid)
            if up is not None:
                check_reply(policy, self.cfg, stage, up, self.image_size)
            record = {
                "round": rnd,
                "stage": stage,
                "client": cid,
                "received": manifest(down) if down is not None else [],
                "sent": manifest(up) if up is not None else None,
            }
            append_jsonl(self.path, record)
