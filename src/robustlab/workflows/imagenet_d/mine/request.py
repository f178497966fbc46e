"""What a ``mine`` call asks for, as three frozen specs validated once.

:class:`MineRule` says who votes and how (the surrogates, their weights and precision, the
k-of-n rule), :class:`MineInputs` which candidates are read, :class:`MineExecution` where
the evaluations run and where the outcome goes. ``robustlab mine`` builds them from its
flags; :func:`robustlab.workflows.imagenet_d.mine.mine` also takes their fields as keywords.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from robustlab.errors import InputError
from robustlab.store import DEFAULT_DB

if TYPE_CHECKING:
    from robustlab.data.labels import LabelSpace

DEFAULT_SURROGATES = ("lite0", "lite1", "lite2")


@dataclass(frozen=True)
class MineRule:
    """The voters and the rule.

    Attributes:
        surrogates: Model specs (or loaded :class:`robustlab.models.base.Model` objects, to
            reuse them across calls); each is one stored evaluation run. Blank specs are
            left out.
        weights: One weights path per surrogate (or None).
        k: Keep when at least ``k`` surrogates are wrong (None: all of them).
        precision, compile: How the surrogates' forward passes compute (a bf16 surrogate
            run is another run, so another mining).
    """

    surrogates: Sequence[Any] = DEFAULT_SURROGATES
    weights: Sequence[Any] | None = None
    k: int | None = None
    precision: str | None = None
    compile: bool = False

    def __post_init__(self) -> None:
        specs = self.specs
        if not specs:
            raise InputError("mining needs at least one surrogate model")
        if len(set(specs)) != len(specs):
            raise InputError(f"a surrogate is listed twice: {specs}")
        n, k = len(specs), self.k_of_n
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= n:
            raise InputError(
                f"k must be an integer from 1 to the number of surrogates ({n}), got {k!r}"
            )
        if len(self.weight_list) != n:
            raise InputError(f"{len(self.weight_list)} weights for {n} surrogates")

    @property
    def models(self) -> list[Any]:
        """The surrogates as given (specs or loaded models), blank specs left out."""
        return [s for s in self.surrogates if not isinstance(s, str) or s.strip()]

    @property
    def specs(self) -> list[str]:
        return [s.strip() if isinstance(s, str) else s.spec for s in self.models]

    @property
    def k_of_n(self) -> Any:
        return len(self.specs) if self.k is None else self.k

    @property
    def weight_list(self) -> list[Any]:
        return list(self.weights) if self.weights else [None] * len(self.specs)


@dataclass(frozen=True)
class MineInputs:
    """The candidates.

    Attributes:
        label_space: Label space of the correctness rule (None: the suite's /
            ``imagenet1k``, as for evaluate).
        labels_csv: Labels CSV for a flat folder (None: ``data/labels.csv``).
        include_clean: Also mine a generated folder's clean (source) images; None: only
            for plain folders (where the clean cell is the folder's images).
        shifts, levels: Restrict a generated folder's cells (passed to evaluate).
    """

    label_space: str | LabelSpace | None = None
    labels_csv: str | Path | None = None
    include_clean: bool | None = None
    shifts: Sequence[str] | None = None
    levels: Sequence[Any] | None = None


@dataclass(frozen=True)
class MineExecution:
    """Where the evaluations run and where the outcome goes.

    Attributes:
        db: Results database (the surrogates' runs and the mining record).
        out: Folder for the hard subset (hard links, or copies with ``copy``),
            ``labels.csv``, ``hard.csv`` and ``mining.json``; None: the record only.
        copy: Copy the kept images instead of hard-linking them.
        device, batch_size, workers, progress: Passed to :func:`robustlab.evaluate`.
        backend, address: Where the surrogates' evaluations run (``"ray"``: a Ray
            cluster); the mining itself is a query on the driver.
    """

    db: str | Path = DEFAULT_DB
    out: str | Path | None = None
    copy: bool = False
    device: str | None = None
    batch_size: int | None = None
    workers: int | None = None
    progress: bool | None = None
    backend: str = "local"
    address: str | None = None
