"""``with obj: ...`` for objects that release what they hold in ``close()``."""

from __future__ import annotations

from types import TracebackType
from typing import Self


class Closing:
    """Mixin: ``with obj:`` gives ``obj`` and calls ``obj.close()`` on the way out,
    also when the block raises (the exception propagates)."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        et: type[BaseException] | None,
        ev: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Release what the object holds (nothing, unless a subclass holds some)."""
