"""``robustlab vlm`` as a workflow: which items to ask about, the model, then
:func:`~robustlab.workflows.imagenet_d.vlm.run.ask_all` into the results database.

The request is :class:`VLMQuestions` (where the items come from: an ImageNet-D root and its
question CSVs, or stored CLIP runs), :class:`VLMModel` (the ``vlm:PATH`` folder, device,
conversation template), :class:`VLMOutputs` (database, progress) and
:class:`~robustlab.workflows.imagenet_d.vlm.run.VLMAsking` (how each question is asked and
scored). The command builds them from its flags and prints the result; :func:`vlm`
(``robustlab.vlm``) routes its keywords to them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from robustlab.errors import InputError
from robustlab.store.connection import DEFAULT_DB
from robustlab.workflows.imagenet_d.vlm.run import VLMAsking, VLMData, VLMResult, ask_all
from robustlab.workflows.keywords import as_names


@dataclass(frozen=True)
class VLMQuestions:
    """Which items: ``data`` (the ImageNet-D root with ``<subset>/<class>/<file>``) and its
    ``questions`` (a CSV or a folder of them; default ``DATA/questions``), or the items and
    distractors of stored CLIP runs (``clip_runs``); only ``subsets`` and the first
    ``limit`` items are asked now (neither is part of the run's identity, so asking about
    one subset and then all of them continues one run)."""

    data: str | Path | None = None
    questions: str | Path | None = None
    clip_runs: tuple[str, ...] | None = field(
        default=None, metadata={"arg": ("clip_run", as_names)}
    )
    subsets: tuple[str, ...] | None = None
    limit: int | None = None

    def __post_init__(self):
        object.__setattr__(self, "clip_runs", as_names(self.clip_runs))
        object.__setattr__(self, "subsets", as_names(self.subsets))
        if self.limit is not None and self.limit < 1:
            raise InputError(f"limit must be at least 1, got {self.limit}")


@dataclass(frozen=True)
class VLMModel:
    """The model: ``model`` (``vlm:PATH``, a local folder saved with ``save_pretrained``),
    where it runs and its conversation ``template`` (default: ImageNet-D's for its family)."""

    model: str
    device: str | None = None
    template: str | None = None


@dataclass(frozen=True)
class VLMOutputs:
    """Where the answers go, and whether a progress line is printed now and then."""

    db: str | Path = DEFAULT_DB
    progress: bool = True


PARTS = {
    "questions": VLMQuestions,
    "model": VLMModel,
    "asking": VLMAsking,
    "outputs": VLMOutputs,
}


def vlm(model: str, **options) -> VLMResult:
    """Ask ``model`` ImageNet-D's two-choice question about every item not yet answered in
    this run, storing the answers as they come (``robustlab vlm``).

    Args:
        model: ``vlm:PATH`` (:class:`VLMModel`).
        **options: The fields of :class:`VLMQuestions` (``data``, ``questions``,
            ``clip_runs``, ``subsets``, ``limit``), :class:`VLMModel` (``device``,
            ``template``), :class:`~robustlab.workflows.imagenet_d.vlm.run.VLMAsking`
            (``mode``, ``seed``, ``shuffle``, ``temperature``, ``max_new_tokens``,
            ``rule``) and :class:`VLMOutputs` (``db``, ``progress``).

    Returns:
        The run (:class:`~robustlab.workflows.imagenet_d.vlm.run.VLMResult`: id, resumed,
        new answers, the per-subset summary, skipped images, template).
    """
    from robustlab.workflows.keywords import build_specs

    return run_vlm(**build_specs("vlm", {**options, "model": model}, PARTS))


def run_vlm(
    questions: VLMQuestions, model: VLMModel, asking: VLMAsking, outputs: VLMOutputs
) -> VLMResult:
    """Read the items, load the model, ask (what ``robustlab vlm`` calls)."""
    from robustlab.store import Store
    from robustlab.models.vlm import load_vlm

    store = Store(outputs.db)
    store.check()
    items, source, root = _items(questions, store)
    if questions.limit is not None:
        items = items[: questions.limit]
    loaded = load_vlm(model.model, device=model.device, prompt_format=model.template)
    return ask_all(
        loaded,
        items,
        store,
        asking,
        VLMData(source=source, data_root=root),
        progress=outputs.progress,
    )


def _items(questions: VLMQuestions, store):
    """The items to ask about, the source that identifies the run, and the data root.

    Subsets and the limit only choose which items to ask now; they are not part of the
    source, so asking about one subset and then all of them continues one run.
    """
    from robustlab.workflows.imagenet_d.vlm.questions import items_from_clip_run, read_question_csvs

    subsets = list(questions.subsets) if questions.subsets else None
    if questions.clip_runs:
        items = [it for rid in questions.clip_runs for it in items_from_clip_run(store, rid)]
        if subsets:
            items = [it for it in items if it.subset in subsets]
        return items, {"clip_runs": sorted(questions.clip_runs)}, None
    if not questions.data:
        raise InputError(
            "pass --data ROOT (the ImageNet-D folder with questions/) or --clip-run RUN_ID"
        )
    root = Path(questions.data).expanduser().resolve()
    # None: the folder's own questions/, read under the link rule (questions.py).
    where = Path(questions.questions).expanduser().resolve() if questions.questions else None
    items = read_question_csvs(root, where, subsets)
    source = {"data": str(root), "questions": str(where or root / "questions")}
    return items, source, str(root)
