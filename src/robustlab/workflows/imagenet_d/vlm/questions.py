"""The two-choice question of ImageNet-D's VLM protocol, and where its items come from.

The paper asks "What is the main object in this image? Choose from the following list:
{gt}, {distractor}." with the distractor taken from a CLIP run: CLIP's top-1 class when it
is wrong, else its top-2, so the wrong option is the one CLIP found most confusable. The
truth is always listed first in the original; :func:`options` can shuffle the order with
the seed rule to measure that positional bias.

Items come from either the published ``questions/<subset>.csv`` files (tab-separated:
``image_dir``, ``gt_category``, ``top1_pred_cate``, ``top2_pred_cate``; ``image_dir``
relative to the dataset root) or a CLIP run stored in the results database (its top-5 ids
hold the top-1 and top-2 needed).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from robustlab.errors import InputError, MissingResourceError
from robustlab.files.safety import file_inside, link_out
from robustlab.seeding import derive_seed

QUESTION = (
    "What is the main object in this image? Choose from the following list: {first}, {second}."
)
CSV_COLUMNS = ("image_dir", "gt_category", "top1_pred_cate", "top2_pred_cate")


@dataclass(frozen=True)
class Item:
    """One image to ask about: its subset, a stable id (the seed key), its file, the true
    class text and CLIP's two best guesses (class texts as the question writes them)."""

    subset: str
    image_id: str
    path: Path
    gt: str
    top1: str
    top2: str


def distractor(gt: str, top1: str, top2: str) -> str:
    """CLIP's top-1 when it is wrong, else its top-2 (the published rule)."""
    wrong = top1 if top1 != gt else top2
    if wrong == gt:
        raise InputError(f"top-1 and top-2 are both the true class {gt!r}: no distractor")
    return wrong


def options(item: Item, *, shuffle: bool = False, seed: int = 0) -> tuple[str, str]:
    """The two options in asking order: truth first (the original), or an order drawn by
    the seed rule for this image when ``shuffle``."""
    pair = (item.gt, distractor(item.gt, item.top1, item.top2))
    if not shuffle:
        return pair
    rng = np.random.default_rng(derive_seed(seed, item.image_id, "vlm-options", "shuffle"))
    return pair if rng.integers(2) == 0 else pair[::-1]


def question(first: str, second: str) -> str:
    """The published question with the options in the given order."""
    return QUESTION.format(first=first, second=second)


def read_question_csvs(root, questions=None, subsets=None) -> list[Item]:
    """Items of the published ``questions/<subset>.csv`` files.

    Args:
        root: The ImageNet-D root (``image_dir`` paths are relative to it).
        questions: A CSV file or a folder of them (default ``root/questions``).
        subsets: Only these subsets (CSV stems), e.g. ``["background"]``.
    """
    root = Path(root).expanduser()
    src = Path(questions).expanduser() if questions else root / "questions"
    leaving = None if questions else link_out(root, "questions")
    if leaving is not None:  # the folder's own questions/ follows the link rule too
        raise InputError(
            f"{src}: {leaving}", hint="copy the questions into the folder, or pass --questions"
        )
    if src.is_dir():  # robustlab.files.safety' link rule: no CSV linked in from outside
        files = sorted(f for f in src.glob("*.csv") if file_inside(src, f.name) is not None)
    elif src.is_file():
        files = [src]
    else:
        raise MissingResourceError(
            f"no question CSVs at {src}",
            hint="pass --questions (ImageNet-D's questions/<subset>.csv) or --clip-run RUN_ID",
        )
    if subsets:
        files = [f for f in files if f.stem in set(subsets)]
    if not files:
        raise MissingResourceError(
            f"no question CSV in {src}" + (f" for subsets {', '.join(subsets)}" if subsets else "")
        )
    items = []
    for f in files:
        with open(f, newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh, delimiter="\t")
            missing = [c for c in CSV_COLUMNS if c not in (reader.fieldnames or [])]
            if missing:
                raise InputError(
                    f"{f} lacks column(s) {', '.join(missing)} (tab-separated "
                    f"{', '.join(CSV_COLUMNS)} expected)"
                )
            for row in reader:
                rel = row["image_dir"].strip()
                items.append(
                    Item(
                        f.stem,
                        rel,
                        root / rel,
                        row["gt_category"].strip(),
                        row["top1_pred_cate"].strip(),
                        row["top2_pred_cate"].strip(),
                    )
                )
    return items


def class_texts(label_space: str | None) -> list[str]:
    """How the question writes each class of a label space: ImageNet-D's CLIP names for
    imagenet-d (so they match the published CSVs and synonyms), else the name with ``_``
    as a space."""
    from robustlab.data.labels import get_label_space
    from robustlab.models.open_clip_models import PAPER_PROTOCOLS

    space = get_label_space(label_space or "imagenet1k")
    protocol = PAPER_PROTOCOLS.get(space.name)
    name = protocol.name if protocol else (lambda c: c.replace("_", " "))
    return [name(c) for c in space.classes]


def items_from_clip_run(store, run_id: str, subset: str | None = None) -> list[Item]:
    """Items from a stored CLIP run: its clean predictions' label and top-5 ids give the
    truth and the two best guesses; image files are the run's data root + sample id.

    Args:
        store: The results :class:`~robustlab.store.Store`.
        run_id: The CLIP run (e.g. ``robustlab evaluate --model open_clip:...
            --label-space imagenet-d --data ROOT/background``).
        subset: Name of the subset (default: the run's data folder name).
    """
    run = store.get_run(run_id)
    if run is None:
        raise InputError(
            f"no run {run_id!r} in {store.path}", hint="`robustlab results` lists the stored runs"
        )
    head = ((run.get("config") or {}).get("model") or {}).get("head")
    if head not in (None, "direct"):
        raise InputError(
            f"run {run_id} ranks ImageNet-1k classes ({head} head), not the classes "
            f"of {run['label_space']}; distractors need a zero-shot CLIP run",
            hint="evaluate open_clip:ARCH with --label-space imagenet-d",
        )
    preds = store.predictions([run_id], columns=["sample_id", "shift", "label", "top5_ids"])
    preds = preds[preds["shift"] == "clean"]
    if preds.empty:
        raise InputError(f"run {run_id} has no clean predictions to take distractors from")
    names = class_texts(run["label_space"])
    root = Path(str(run["data_root"] or "."))
    subset = subset or root.name
    items = []
    for sid, label, top in zip(preds["sample_id"], preds["label"], preds["top5_ids"]):
        top = [int(t) for t in top]
        if len(top) < 2 or label is None or np.isnan(label):
            raise InputError(f"run {run_id}: sample {sid} has no label or fewer than 2 guesses")
        if max(top[:2]) >= len(names):
            raise InputError(
                f"run {run_id}: sample {sid}'s guesses are not classes of "
                f"{run['label_space']} (a distractor needs a zero-shot CLIP run)"
            )
        items.append(
            Item(
                subset,
                f"{subset}/{sid}",
                root / sid,
                names[int(label)],
                names[top[0]],
                names[top[1]],
            )
        )
    return items
