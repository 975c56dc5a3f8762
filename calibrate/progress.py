"""The progress a long calibration step reports: a bar's protocol, the factory the CLI passes in, and a silent one."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Protocol


class Bar(Protocol):
    def update(self, n: int) -> None: ...


Progress = Callable[[str, int], contextlib.AbstractContextManager[Bar]]


@contextlib.contextmanager
def no_progress(label: str, total: int) -> Iterator[Bar]:
    class _Bar:
        def update(self, n: int) -> None:
            pass

    yield _Bar()
