"""Progress bars: one per cell (or per shift when a suite has many cells).

Work is ordered sample-major (each photo is decoded once and all its cells produced), so
every bar advances as batches are stored; each shows how many of that cell's images are
done. With more than ``max_bars`` cells, the levels of a shift share one bar so the
display fits in a terminal.

When stderr is not a terminal (a CI log, ``2> file``, a pipe) bars would be an unreadable
stream of carriage returns, so :class:`LineProgress` prints one line every
``interval`` seconds instead: done/total, rate and ETA. Both count a cell whose image was
skipped as done, so a run with skips still ends at 100 %.
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from collections.abc import Iterable

# Seconds between two progress lines when stderr is not a terminal.
LINE_INTERVAL_S = 10.0


def _duration(seconds: float) -> str:
    s = round(seconds)
    return (
        f"{s // 3600}h{s % 3600 // 60:02d}m"
        if s >= 3600
        else (f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s")
    )


class LineProgress:
    """Periodic one-line progress for logs: ``what: done/total (pct), rate/s, ETA``.

    Args:
        total: Units of work in all (e.g. predictions: images x cells).
        what: Line prefix naming the job.
        unit: Unit name in the rate.
        done: Units already done before this session (a resumed run): counted in
            done/total, not in the rate.
        interval: Seconds between lines; a line is also printed at the start and at close
            (at close only when it would say something new: a resumed run with nothing to
            do prints its one ``done/total`` line once, not twice).
        stream: Where lines go (default ``sys.stderr``).
        clock: Time source (monotonic seconds).
    """

    def __init__(
        self,
        total: int,
        *,
        what: str = "progress",
        unit: str = "img",
        done: int = 0,
        interval: float = LINE_INTERVAL_S,
        stream=None,
        clock=time.monotonic,
    ):
        self.total, self.done, self.start_done = int(total), int(done), int(done)
        self.what, self.unit, self.interval = what, unit, float(interval)
        self.stream = stream if stream is not None else sys.stderr
        self.clock = clock
        self.t0 = self.last = clock()
        self.closed = False
        self.note = ""  # appended to each line, e.g. the current training loss
        self._said: tuple[int, str] | None = None  # (done, note) of the last line
        self._line()

    def _line(self) -> None:
        self._said = (self.done, self.note)
        pct = 100.0 * self.done / self.total if self.total else 100.0
        elapsed = self.clock() - self.t0
        new = self.done - self.start_done
        parts = [f"{self.what}: {self.done}/{self.total} ({pct:.0f} %)"]
        if elapsed > 0 and new > 0:
            rate = new / elapsed
            parts.append(f"{rate:.1f} {self.unit}/s")
            left = self.total - self.done
            parts.append(
                f"ETA {_duration(left / rate)}" if left > 0 else f"took {_duration(elapsed)}"
            )
        if self.note:
            parts.append(self.note)
        print(", ".join(parts), file=self.stream, flush=True)

    def update(self, n: int) -> None:
        self.done = min(self.total, self.done + int(n))
        now = self.clock()
        if now - self.last >= self.interval:
            self.last = now
            self._line()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            if self._said != (self.done, self.note):
                self._line()


class StageLines:
    """One stderr line as each stage of a job starts: ``report 3/6: plots (4.2 s so far)``.

    For jobs made of a few unequal steps (building a report) where a rate means nothing
    but a silent minute looks like a hang.
    """

    def __init__(
        self, what: str, n_stages: int, *, enabled: bool = True, stream=None, clock=time.monotonic
    ):
        self.what, self.n, self.enabled = what, int(n_stages), enabled
        self.stream = stream if stream is not None else sys.stderr
        self.clock, self.t0, self.k = clock, clock(), 0

    def stage(self, name: str) -> None:
        self.k += 1
        if self.enabled:
            print(
                f"{self.what} {self.k}/{self.n}: {name} ({self.clock() - self.t0:.1f} s so far)",
                file=self.stream,
                flush=True,
            )

    def done(self) -> None:
        if self.enabled:
            print(
                f"{self.what}: done in {self.clock() - self.t0:.1f} s", file=self.stream, flush=True
            )


class CellProgress:
    """tqdm bars keyed by cell; ``update(keys)`` advances the bars of stored rows.

    Args:
        totals: A cell's `(shift, key)` (:attr:`robustlab.cells.Cell.stored`) -> images to do.
        enabled: Show progress at all.
        max_bars: Above this many cells the levels of a shift share a bar.
        done: The same keys -> images already stored (a resumed run).
        terminal: Bars on a terminal, periodic lines otherwise (default: whether stderr
            is a terminal).
        what: Prefix of the progress lines.
    """

    def __init__(
        self,
        totals: dict[tuple[str, str], int],
        *,
        enabled: bool = True,
        max_bars: int = 24,
        done: dict[tuple[str, str], int] | None = None,
        terminal: bool | None = None,
        what: str = "evaluate",
    ):
        self.enabled = enabled and bool(totals)
        self.by_shift = len(totals) > max_bars
        self.bars = {}
        self.lines: LineProgress | None = None
        if not self.enabled:
            return
        if not (sys.stderr.isatty() if terminal is None else terminal):
            self.lines = LineProgress(
                sum(totals.values()), what=what, unit="pred", done=sum((done or {}).values())
            )
            return
        from tqdm.auto import tqdm

        grouped: Counter = Counter()
        initial: Counter = Counter()
        for key, total in totals.items():
            grouped[self._bar_key(key)] += total
            initial[self._bar_key(key)] += (done or {}).get(key, 0)
        for pos, (key, total) in enumerate(grouped.items()):
            name = key if isinstance(key, str) else f"{key[0]}/{key[1]}"
            self.bars[key] = tqdm(
                total=total,
                initial=initial[key],
                desc=name,
                position=pos,
                unit="img",
                leave=True,
                dynamic_ncols=True,
            )

    def _bar_key(self, key: tuple[str, str]):
        return key[0] if self.by_shift else key

    def update(self, keys: Iterable[tuple[str, str]]) -> None:
        """Advance by one image per key: a stored prediction or a skipped cell."""
        if not self.enabled:
            return
        if self.lines is not None:
            self.lines.update(sum(1 for _ in keys))
            return
        for key, n in Counter(self._bar_key(k) for k in keys).items():
            bar = self.bars.get(key)
            if bar is not None:
                bar.update(n)

    def close(self) -> None:
        if self.lines is not None:
            self.lines.close()
        for bar in self.bars.values():
            bar.close()
        self.bars = {}


def throughput_line(numbers: dict) -> str:
    """The one line that ends an evaluation: ``throughput: 1200 predictions in 12.3 s, 97.6
    predictions/s, model busy 64 % of the wall time (cpu)``.

    Args:
        numbers: :func:`robustlab.execution.bookkeeping.throughput`'s dict (``predictions``,
            ``wall_s``, ``per_s``, ``busy``, ``device``); busy None (the model ran on Ray
            actors, whose time the stages line gives) leaves that part out.
    """
    n = int(numbers.get("predictions") or 0)
    wall = float(numbers.get("wall_s") or 0.0)
    line = f"throughput: {n} predictions in {wall:.1f} s"
    if numbers.get("per_s") is not None and n:
        line += f", {numbers['per_s']:.1f} predictions/s"
    busy = numbers.get("busy")
    if busy is not None and n:
        where = str(numbers.get("device") or "?")
        who = "GPU" if where.startswith("cuda") else "model"
        line += f", {who} busy {100 * busy:.0f} % of the wall time ({where})"
    return line
