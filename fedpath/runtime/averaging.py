r"""Weight averaging across rounds (``evaluation.swa_from``).

Stochastic weight averaging (SWA, Izmailov et al., UAI 2018) averages the
weights a run passes through instead of keeping its last point; averaged densely
it is among the strongest domain-generalization methods of DomainBed (SWAD, Cha
et al., NeurIPS 2021): the average lies in a flatter region of the loss, which
moves less under the shift to an unseen domain. In a federation the points are
the global models after each round, and the average costs nothing: the
coordinator already holds them, nothing more crosses the wire.

With ``evaluation.swa_from: k`` the coordinator keeps the running mean of the
global weights after rounds ``k .. train.rounds``:

.. math:: \bar w_n = \bar w_{n-1} + (w_{k+n-1} - \bar w_{n-1}) / n

over every floating-point array (BatchNorm running statistics included, as
SWA's cheap alternative to re-estimating them); integer arrays (BatchNorm's
``num_batches_tracked``) keep the last round's value. The mean is held in
float64 and checkpointed with the run, so a resumed run averages exactly what
an uninterrupted one does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from fedpath.algorithms.names import WEIGHTS
from fedpath.types import ArrayDict, Payload

if TYPE_CHECKING:
    from fedpath.data.base import Split
    from fedpath.runtime.evaluate import EvalModel
    from fedpath.runtime.selection import Selector, ValidationPredictions
    from fedpath.tasks import Task

#: the scalar key of the number of rounds in the mean
COUNT = "count"


class RoundAverage:
    """The running mean of the global weights after rounds ``start`` .. end."""

    def __init__(self, start: int) -> None:
        if start < 1:
            raise ValueError(f"averaging starts at a round >= 1, got {start}")
        self.start = start
        self.count = 0
        self._mean: dict[str, np.ndarray] = {}

    def update(self, rnd: int, weights: ArrayDict) -> None:
        """Add the global ``weights`` after round ``rnd`` (before ``start``:
        ignored)."""
        if rnd < self.start:
            return
        if self.count and set(weights) != set(self._mean):
            raise ValueError(
                f"round {rnd}'s global weights have other arrays than the mean's "
                "(the model changed during the run)"
            )
        self.count += 1
        for key, value in weights.items():
            if not np.issubdtype(value.dtype, np.floating):
                self._mean[key] = np.array(value, copy=True)
            elif self.count == 1:
                self._mean[key] = value.astype(np.float64)
            else:
                self._mean[key] += (value - self._mean[key]) / self.count

    @property
    def rounds(self) -> list[int]:
        """The rounds in the mean so far."""
        return list(range(self.start, self.start + self.count))

    def weights(self, like: ArrayDict) -> ArrayDict | None:
        """The mean in the dtypes of ``like`` (a round's global weights); None
        before any round was added."""
        if not self.count:
            return None
        return {k: self._mean[k].astype(like[k].dtype) for k in like}

    def state(self) -> Payload:
        return Payload({WEIGHTS: dict(self._mean)}, {COUNT: self.count})

    def load_state(self, state: Payload | None) -> None:
        """Restore :meth:`state` (None: nothing averaged yet)."""
        if state is None:
            self.count, self._mean = 0, {}
            return
        self.count = int(state.scalars[COUNT])
        self._mean = {
            k: (v.astype(np.float64) if np.issubdtype(v.dtype, np.floating) else v)
            for k, v in state.arrays.get(WEIGHTS, {}).items()
        }


def averaged_block(
    averager: RoundAverage,
    last: ArrayDict,
    task: Task,
    model: EvalModel,
    target: Split | None,
    selector: Selector | None,
    predictions: Callable[[ArrayDict], ValidationPredictions],
) -> dict[str, Any]:
    """The final record's ``averaged`` block: the target metrics of the mean of
    the global weights (and, with validation, its own temperature and operating
    point from ``predictions``). ``model`` holds ``last`` again afterwards."""
    weights = averager.weights(last)
    if weights is None:
        return {}
    model.load(weights)
    block: dict[str, Any] = {"rounds": averager.rounds}
    if target is not None:  # None: consortium mode, nothing held out
        block["target"] = task.evaluate(model.module, target)
    if selector is not None:
        val = predictions(weights)
        model.load(weights)  # (the transport may have used the model)
        block.update(selector.decide(task, model.module, target, val))
    model.load(last)
    return {"averaged": block}
