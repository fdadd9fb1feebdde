"""``evaluation.adapt_bn``: the final target metrics with BatchNorm adapted to
the target (AdaBN, :mod:`fedpath.tasks.adapt`).

For the last global weights (and for the selected round's and the averaged
weights, when the run has them) the target's unlabelled images re-estimate a
copy's BatchNorm statistics; the copy's target metrics become an ``adapted``
block beside the unadapted ones. Nothing crosses the network: the coordinator
adapts its own copy of the global model.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any, Literal

from fedpath.tasks.adapt import adaptation_split
from fedpath.types import ArrayDict

if TYPE_CHECKING:
    from fedpath.data.base import DomainDataset, Split
    from fedpath.runtime.averaging import RoundAverage
    from fedpath.runtime.evaluate import EvalModel
    from fedpath.runtime.selection import Selector
    from fedpath.tasks import Task


def adapted_blocks(
    final: dict[str, Any],
    last: ArrayDict,
    *,
    task: Task,
    model: EvalModel,
    dataset: DomainDataset,
    target: tuple[str, Split],
    eval_split: Literal["all", "test"],
    selector: Selector | None,
    averager: RoundAverage | None,
) -> dict[str, Any]:
    """``final`` with ``adapted`` blocks: of ``last`` (top level), of the
    selected round's weights (in ``selected``) and of the averaged weights (in
    ``averaged``). ``target``: the held-out domain and its evaluated split;
    ``eval_split``: which of its splits (``lodo.eval_split``) gives the images.
    ``model`` holds ``last`` again afterwards."""
    domain, split = target
    images, on = adaptation_split(dataset, domain, eval_split)

    def block(weights: ArrayDict) -> dict[str, Any]:
        model.load(weights)
        adapted = copy.deepcopy(model.module)  # the evaluation model stays as is
        n = task.adapt(adapted, images)
        return {"on": on, "n": n, "target": task.evaluate(adapted, split)}

    out = {**final, "adapted": block(last)}
    if selector is not None and selector.best is not None:
        selected = dict(out.get("selected", {}))
        selected["adapted"] = block(selector.best.weights)
        out["selected"] = selected
    averaged = averager.weights(last) if averager else None
    if averaged is not None:
        out["averaged"] = {**out["averaged"], "adapted": block(averaged)}
    model.load(last)
    return out
