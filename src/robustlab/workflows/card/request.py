"""What one ``robustlab card`` depends on, validated once before any work."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from robustlab.errors import InputError
from robustlab.store import DEFAULT_DB as DB_NAME


@dataclass(frozen=True)
class CardRequest:
    """The card's inputs and options.

    Attributes:
        model: Model spec (``lite0``, ``timm:resnet50``, ...).
        data: Folder of labelled source photos (ImageFolder tree, or flat + ``labels.csv``).
        out: Folder for the card's files (card.md, card.json, model-index.yaml, cells/,
            report.html); the masks and labels it makes go to :attr:`inputs`.
        masks: Foreground masks for the scene suites and the ImageNet-E edits.
        auto_masks: Make masks with GrabCut into ``<out>-inputs/masks`` when none are given.
        imagenet_d: An ImageNet-D set (``<subset>/<class>/<file>``): a published download
            or a ``synth``/``mine``/``review`` output.
        db: Results database (default ``./robustlab.duckdb``, evaluate's); runs already
            stored there with the same identity are reused, not recomputed.
        baseline: A model spec evaluated on the same ImageNet-C images as the CE
            normaliser when the AlexNet errors do not apply.
        labels_csv: Labels CSV of ``data`` when it is not the folder's own.
        shifts, levels: A reduced card: only these shifts and levels of each suite (the
            selection grammar of ``evaluate``; a suite with none of them is skipped). The
            AlexNet errors then never apply (they need all 75 ImageNet-C cells).
        seed: Seed of the shifts (each benchmark's run identity includes it).
        bootstrap_seed: Seed of the bootstrap intervals.
        n_resamples: Bootstrap resamples per interval.
        workers: Shift worker processes (``evaluate``'s default when None).
        device: Model device (auto when None).
        progress: Progress bars.
        report: Also write ``out/report.html`` with the card's section.
    """

    model: str
    data: Path
    out: Path
    masks: Path | None = None
    auto_masks: bool = False
    imagenet_d: Path | None = None
    db: Path = Path(DB_NAME)
    baseline: str | None = None
    labels_csv: Path | None = None
    shifts: tuple[str, ...] | None = None
    levels: tuple | None = None
    seed: int = 0
    bootstrap_seed: int = 0
    n_resamples: int = 1000
    workers: int | None = None
    device: str | None = None
    progress: bool | None = None
    report: bool = True

    def __post_init__(self) -> None:
        from robustlab.seeding import check_seed

        for name in ("data", "out", "masks", "imagenet_d", "db", "labels_csv"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, Path(value).expanduser())
        if not self.data.is_dir():
            raise InputError(
                f"--data {self.data} is not a folder", hint="give a folder of labelled photos"
            )
        for flag, folder in (("--masks", self.masks), ("--imagenet-d", self.imagenet_d)):
            if folder is not None and not folder.is_dir():
                raise InputError(f"{flag} {folder} is not a folder")
        if self.masks is not None and self.auto_masks:
            raise InputError("--masks and --auto-masks exclude each other; give one")
        for name in ("shifts", "levels"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(
                    self, name, tuple(value.split(",") if isinstance(value, str) else value)
                )
        if int(self.n_resamples) < 1:
            raise InputError(f"--resamples must be at least 1, not {self.n_resamples}")
        check_seed(self.seed)
        check_seed(self.bootstrap_seed)

    @property
    def inputs(self) -> Path:
        """``<out>-inputs/``: what the card makes to be read as input (``--auto-masks``'
        masks, ImageNet-9's labels CSV). Apart from ``out``, since a run records the
        inputs it read, and no output folder of a command may hold its inputs."""
        return self.out.parent / f"{self.out.name}-inputs"

    @property
    def database(self) -> Path:
        """The results database the card reads and adds to."""
        return self.db
