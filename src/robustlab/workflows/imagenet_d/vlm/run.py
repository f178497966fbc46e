"""One VLM evaluation on ImageNet-D's two-choice question, stored and resumable.

The run's identity is a hash of everything that decides its answers (model fingerprint,
mode, seed, shuffle, temperature, answer length, the items' source), so rerunning the
same command resumes it: images already answered are skipped, new answers are added.
A run is asked for with two frozen specs, :class:`VLMAsking` (how each question is asked
and scored) and :class:`VLMData` (where the questions came from); ``robustlab vlm`` builds
them, :func:`evaluate_vlm` routes its keywords to them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from robustlab.errors import InputError
from robustlab.files.safety import outside
from robustlab.records.identity import RecordStyle, make_record, spaced_json
from robustlab.seeding import check_seed, derive_seed
from robustlab.store.vlm import VLM_TASK, answered, summary, write_answers

from .questions import Item, options, question
from .scoring import Verdict, check_rule, score_answer

log = logging.getLogger(__name__)
MODES = ("original", "likelihood")
BATCH = 16  # answers per database write


@dataclass
class VLMResult:
    """One run's answers: its id, whether it was stored already, the answers this call
    added, the per-subset summary (a DataFrame), the images skipped with their reason, and
    the conversation template the model was asked with."""

    run_id: str
    resumed: bool
    n_new: int
    summary: object  # DataFrame, one row per subset
    skipped: list = field(default_factory=list)
    prompt_format: str = ""


# How vlm runs were always spelled (an id prefix, json.dumps' separators, the data folder
# as given, no package versions), so every stored vlm run resumes under its id.
RECORD_STYLE = RecordStyle(prefix="vlm-", spelling=spaced_json, resolve_root=False, versions=False)


def answer_item(
    vlm,
    item: Item,
    *,
    mode: str,
    seed: int,
    shuffle: bool,
    temperature: float,
    max_new_tokens: int,
    image,
    rule: str = "official",
) -> dict:
    """Ask ``vlm`` about one item and score the answer (a row of ``vlm_answers``)."""
    first, second = options(item, shuffle=shuffle, seed=seed)
    q = question(first, second)
    gt, wrong = item.gt, (second if first == item.gt else first)
    if mode == "original":
        s = derive_seed(seed, item.image_id, "vlm", "original")
        text = vlm.sample(image, q, seed=s, temperature=temperature, max_new_tokens=max_new_tokens)
        v = score_answer(text, gt, wrong, rule=rule)
        logprobs = None
    else:
        s = None
        logprobs = vlm.option_logprobs(image, q, [first, second])
        # The answer is an option itself: no text to parse, never dropped.
        text = first if logprobs[0] >= logprobs[1] else second
        v = Verdict(text, text == gt, None)
    return {
        "subset": item.subset,
        "image_id": item.image_id,
        "gt": gt,
        "distractor": wrong,
        "options": [first, second],
        "answer": text,
        "chosen": v.chosen,
        "correct": v.correct,
        "dropped": v.dropped,
        "logprobs": logprobs,
        "seed": s,
    }


@dataclass(frozen=True)
class VLMAsking:
    """How each question is asked and its answer scored (all of it in the run's identity).

    Attributes:
        mode: ``original`` (sampled free text, substring scoring) or ``likelihood`` (the
            option with the higher log-likelihood; deterministic).
        seed: Global seed of the seed rule (per-image sampling and shuffle draws).
        shuffle: Ask the options in a seeded random order instead of truth first.
        temperature, max_new_tokens: Sampling of the original mode (above 0).
        rule: How a free-text answer is scored
            (:data:`robustlab.workflows.imagenet_d.vlm.scoring.RULES`): ``official``
            (ImageNet-D's compute_accuracy.py) or ``nested`` (stricter).
    """

    mode: str = "original"
    seed: int = 0
    shuffle: bool = False
    temperature: float = 0.2
    max_new_tokens: int = 512
    rule: str = "official"

    def __post_init__(self):
        check_seed(self.seed)  # the one seed rule (robustlab.seeding)
        if self.mode not in MODES:
            raise InputError(
                f"unknown VLM scoring mode {self.mode!r}; use one of {', '.join(MODES)}"
            )
        if self.mode == "original" and not self.temperature > 0:
            raise InputError("the original mode samples: --temperature must be above 0")

    def answer(self, vlm, item: Item, image) -> dict:
        """:func:`answer_item` with these settings."""
        return answer_item(
            vlm,
            item,
            mode=self.mode,
            seed=self.seed,
            shuffle=self.shuffle,
            temperature=self.temperature,
            max_new_tokens=self.max_new_tokens,
            image=image,
            rule=self.rule,
        )


@dataclass(frozen=True)
class VLMData:
    """Where the questions came from: ``source`` (part of the run identity) and the data
    folder their images must lie in (None: no such check)."""

    source: dict | None = None
    data_root: str | None = None


def evaluate_vlm(vlm, items: list[Item], store, *, progress: bool = False, **options) -> VLMResult:
    """Answer every item not yet answered in this run, storing answers as they come.

    Args:
        vlm: A loaded :class:`~robustlab.models.vlm.VLM`.
        items: What to ask (:mod:`robustlab.workflows.imagenet_d.vlm.questions`).
        store: The results :class:`~robustlab.store.Store`.
        progress: Print a progress line on stderr now and then (items answered).
        options: The fields of :class:`VLMAsking` (``mode``, ``seed``, ``shuffle``,
            ``temperature``, ``max_new_tokens``, ``rule``) and :class:`VLMData`
            (``source``, ``data_root``).
    """
    from robustlab.workflows.keywords import route_keywords

    parts = route_keywords("evaluate_vlm", options, {"asking": VLMAsking, "data": VLMData})
    asking, data = VLMAsking(**parts["asking"]), VLMData(**parts["data"])
    return ask_all(vlm, items, store, asking, data, progress=progress)


def run_record(vlm, asking: VLMAsking, data: VLMData):
    """The run's stored record, through :func:`robustlab.records.identity.make_record`: its id
    hashes the model's fingerprint and everything that decides an answer and its verdict
    (another template, sampling filter or scoring rule is another run, never a resumed
    one)."""
    original = asking.mode == "original"
    config = {
        "task": VLM_TASK,
        "mode": asking.mode,
        "shuffle": bool(asking.shuffle),
        "temperature": float(asking.temperature) if original else None,
        "max_new_tokens": int(asking.max_new_tokens) if original else None,
        "source": data.source or {},
        "prompt_format": vlm.prompt_format,
        "top_k": vlm.top_k if original else None,
        "top_p": vlm.top_p if original else None,
        "scoring": check_rule(asking.rule) if original else None,
    }
    return make_record(
        {"model": vlm.fingerprint, **config, "seed": int(asking.seed)},
        data_root=data.data_root,
        config={**config, "model": vlm.describe()},
        n_samples=0,  # counted when the run finishes
        style=RECORD_STYLE,
        model_spec=vlm.spec,
        weights_hash=vlm.fingerprint,
        suite="imagenet-d-vlm",
        label_space="imagenet-d",
        preprocessing={},
    )


def ask_all(
    vlm, items: list[Item], store, asking: VLMAsking, data: VLMData, *, progress: bool = False
) -> VLMResult:
    """:func:`evaluate_vlm` of typed specs (what ``robustlab vlm`` calls)."""
    if not items:
        raise InputError("no questions to ask (the question source is empty)")
    record = run_record(vlm, asking, data)
    run_id = record.run_id
    resumed = not store.start_run(record)
    done = answered(store, run_id)
    todo = [it for it in items if it.image_id not in done]
    skipped: list = []
    pending: list[dict] = []
    n_new, status = 0, "failed"
    lines = None
    if progress:
        from robustlab.execution.progress import LineProgress

        lines = LineProgress(len(items), what="vlm", unit="item", done=len(items) - len(todo))
    try:
        for item in _ticking(todo, lines):
            image = _open(item, data.data_root, skipped)
            if image is None:
                continue
            pending.append({"run_id": run_id, **asking.answer(vlm, item, image)})
            if len(pending) >= BATCH:
                n_new += write_answers(store, pending)
                pending = []
        n_new += write_answers(store, pending)
        pending = []
        status = "finished"
    except KeyboardInterrupt:
        n_new += write_answers(store, pending)
        status = "interrupted"
        raise
    finally:
        if lines is not None:
            lines.close()
        store.finish_run(run_id, status=status, n_samples=len(done) + n_new, skipped=skipped)
    return VLMResult(run_id, resumed, n_new, summary(store, run_id), skipped, vlm.prompt_format)


def _open(item: Item, data_root: str | None, skipped: list):
    """The item's image in RGB, or None (the reason appended to ``skipped``)."""
    from PIL import Image

    from robustlab.data.images import ImageError, read_image

    if data_root is not None and outside(data_root, item.path):
        # robustlab.files.safety' link rule: a question CSV's ../ path or a link out of the data
        # folder is never read.
        skipped.append([item.image_id, "not a file inside the data folder"])
        log.warning("skipping %s: not a file inside %s", item.image_id, data_root)
        return None
    try:
        # The one image reader (header limits: a decompression bomb is refused unread);
        # the pixels as stored, as the official code's Image.open(...).convert("RGB").
        return Image.fromarray(read_image(item.path, exif_transpose=False).rgb)
    except ImageError as exc:
        skipped.append([item.image_id, f"unreadable image: {exc.reason}"])
        log.warning("skipping %s: %s", item.image_id, exc.reason)
        return None


def _ticking(items, lines):
    """``items``, one progress unit counted as each is finished (skipped ones too)."""
    for item in items:
        yield item
        if lines is not None:
            lines.update(1)
