"""One VLM evaluation on ImageNet-D's two-choice question, stored and resumable.

The run's identity is a hash of everything that decides its answers (model fingerprint,
mode, seed, shuffle, temperature, answer length, the items' source), so rerunning the
same command resumes it: images already answered are skipped, new answers are added.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from robustlab.errors import InputError
from robustlab.paths import outside
from robustlab.run.identity import RecordStyle, make_record, spaced_json
from robustlab.seeding import derive_seed
from robustlab.store.vlm import VLM_TASK, answered, summary, write_answers

from .questions import Item, options, question
from .scoring import Verdict, check_rule, score_answer

log = logging.getLogger(__name__)
MODES = ("original", "likelihood")
BATCH = 16  # answers per database write


@dataclass
class VLMResult:
    run_id: str
    resumed: bool
    n_new: int
    summary: object  # DataFrame, one row per subset
    skipped: list = field(default_factory=list)


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


def evaluate_vlm(
    vlm,
    items: list[Item],
    store,
    *,
    mode: str = "original",
    seed: int = 0,
    shuffle: bool = False,
    temperature: float = 0.2,
    max_new_tokens: int = 512,
    source: dict | None = None,
    data_root: str | None = None,
    rule: str = "official",
    progress: bool = False,
) -> VLMResult:
    """Answer every item not yet answered in this run, storing answers as they come.

    Args:
        vlm: A loaded :class:`~robustlab.workflows.imagenet_d.vlm.model.VLM`.
        items: What to ask (:mod:`robustlab.workflows.imagenet_d.vlm.questions`).
        store: The results :class:`~robustlab.store.Store`.
        mode: ``original`` (sampled free text, substring scoring) or ``likelihood``
            (the option with the higher log-likelihood; deterministic).
        seed: Global seed of the seed rule (per-image sampling and shuffle draws).
        shuffle: Ask the options in a seeded random order instead of truth first.
        source: Where the items came from (part of the run identity).
        rule: How a free-text answer is scored (:data:`robustlab.workflows.imagenet_d.vlm.scoring.RULES`):
            ``official`` (ImageNet-D's compute_accuracy.py) or ``nested`` (stricter).
        progress: Print a progress line on stderr now and then (items answered).
    """
    from PIL import Image, UnidentifiedImageError

    if mode not in MODES:
        raise InputError(f"unknown VLM scoring mode {mode!r}; use one of {', '.join(MODES)}")
    if mode == "original" and not temperature > 0:
        raise InputError("the original mode samples: --temperature must be above 0")
    if not items:
        raise InputError("no questions to ask (the question source is empty)")
    original = mode == "original"
    config = {
        "task": VLM_TASK,
        "mode": mode,
        "shuffle": bool(shuffle),
        "temperature": float(temperature) if mode == "original" else None,
        "max_new_tokens": int(max_new_tokens) if mode == "original" else None,
        "source": source or {},
        # What decides an answer and its verdict: another template, sampling filter or
        # scoring rule is another run, never a resumed one.
        "prompt_format": vlm.prompt_format,
        "top_k": vlm.top_k if original else None,
        "top_p": vlm.top_p if original else None,
        "scoring": check_rule(rule) if original else None,
    }
    record = make_record(
        {"model": vlm.fingerprint, **config, "seed": int(seed)},
        data_root=data_root,
        config={**config, "model": vlm.describe()},
        n_samples=0,  # counted when the run finishes
        style=RECORD_STYLE,
        model_spec=vlm.spec,
        weights_hash=vlm.fingerprint,
        suite="imagenet-d-vlm",
        label_space="imagenet-d",
        preprocessing={},
    )
    run_id = record.run_id
    resumed = not store.start_run(record)
    done = answered(store, run_id)
    todo = [it for it in items if it.image_id not in done]
    skipped, pending, n_new, status = [], [], 0, "failed"
    lines = None
    if progress:
        from robustlab.run.progress import LineProgress

        lines = LineProgress(len(items), what="vlm", unit="item", done=len(items) - len(todo))
    try:
        for item in _ticking(todo, lines):
            if data_root is not None and outside(data_root, item.path):
                # robustlab.paths' link rule: a question CSV's ../ path or a link out of
                # the data folder is never read.
                skipped.append([item.image_id, "not a file inside the data folder"])
                log.warning("skipping %s: not a file inside %s", item.image_id, data_root)
                continue
            try:
                with Image.open(item.path) as im:
                    image = im.convert("RGB")
            except (OSError, UnidentifiedImageError) as exc:
                skipped.append([item.image_id, f"unreadable image: {exc}"])
                log.warning("skipping %s: %s", item.image_id, exc)
                continue
            pending.append(
                {
                    "run_id": run_id,
                    **answer_item(
                        vlm,
                        item,
                        mode=mode,
                        seed=seed,
                        shuffle=shuffle,
                        temperature=temperature,
                        max_new_tokens=max_new_tokens,
                        image=image,
                        rule=rule,
                    ),
                }
            )
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
    return VLMResult(run_id, resumed, n_new, summary(store, run_id), skipped)


def _ticking(items, lines):
    """``items``, one progress unit counted as each is finished (skipped ones too)."""
    for item in items:
        yield item
        if lines is not None:
            lines.update(1)
