"""Progress bars: one per cell (or per shift when a suite has many cells).

Work is ordered sample-major (each photo is decoded once and all its cells produced), so
every bar advances as batches are stored; each shows how many of that cell's images are
done. With more than ``max_bars`` cells, the levels of a shift share one bar so the
display fits in a terminal.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable


class CellProgress:
    """tqdm bars keyed by cell; ``update(keys)`` advances the bars of stored rows."""

    def __init__(self, totals: dict[tuple[str, str], int], *, enabled: bool = True,
                 max_bars: int = 24, done: dict[tuple[str, str], int] | None = None):
        self.enabled = enabled and bool(totals)
        self.by_shift = len(totals) > max_bars
        self.bars = {}
        if not self.enabled:
            return
        from tqdm.auto import tqdm

        grouped: Counter = Counter()
        initial: Counter = Counter()
        for key, total in totals.items():
            grouped[self._bar_key(key)] += total
            initial[self._bar_key(key)] += (done or {}).get(key, 0)
        for pos, (key, total) in enumerate(grouped.items()):
            name = key if isinstance(key, str) else f"{key[0]}/{key[1]}"
            self.bars[key] = tqdm(total=total, initial=initial[key], desc=name, position=pos,
                                  unit="img", leave=True, dynamic_ncols=True)

    def _bar_key(self, key: tuple[str, str]):
        return key[0] if self.by_shift else key

    def update(self, keys: Iterable[tuple[str, str]]) -> None:
        if not self.enabled:
            return
        for key, n in Counter(self._bar_key(k) for k in keys).items():
            bar = self.bars.get(key)
            if bar is not None:
                bar.update(n)

    def close(self) -> None:
        for bar in self.bars.values():
            bar.close()
        self.bars = {}
