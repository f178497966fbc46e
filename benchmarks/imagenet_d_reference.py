"""Reference fixtures from ImageNet-D's official VLM code: scorer verdicts and prompts.

The published scorer (chenshuang-zhang/imagenet_d, ``LLaVA/compute_accuracy.py``, MIT) is
a script, not a library: it walks a hard-coded results folder, reads every
``LLava_predictions.csv`` (tab-separated) and writes ``*_formated.csv`` with a verdict per
answer (``LLaVa TRUE``/``FALSE``/``DOUBLE``/``TODO``). This script

1. builds the grid: every ordered pair (truth, distractor) of ImageNet-D's 113 class texts
   (the question's spelling) x the answer forms of :data:`ANSWERS` (113 x 112 x 7 = 88,592
   answers), written as one ``LLava_predictions.csv`` in a temporary folder;
2. copies the official file out of its git mirror into another temporary folder
   (``git show``, never a dependency of robustlab) and runs it unchanged in a subprocess
   whose ``os.walk`` lists only the grid's folder;
3. stores the verdicts as numbers (0 right, 1 wrong, 2 both named, 3 neither) in
   ``tests/fixtures/imagenet_d_scorer_grid.npz`` with the class texts, the answer forms and
   the git blob id of the file that produced them;
4. prints how many verdicts robustlab's rules (:mod:`robustlab.workflows.imagenet_d.vlm.scoring`) give
   differently (``official`` must give none);
5. builds the prompt of every conversation template robustlab knows with the official
   ``LLaVA/llava/conversation.py`` (copied out the same way, run in a subprocess, as
   ``eval_imagenet_d.py`` does: ``copy()``, the user turn ``<image>\\n`` + question, the
   assistant turn None, ``get_prompt()``) and stores them in
   ``tests/fixtures/imagenet_d_prompts.json``.

Usage::

    python benchmarks/imagenet_d_reference.py [--mirror /work/.mirror/chenshuang-zhang+imagenet_d/repo]
"""

from __future__ import annotations

import argparse
import csv
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

MIRROR = Path("/work/.mirror/chenshuang-zhang+imagenet_d/repo")
SCRIPT = "LLaVA/compute_accuracy.py"
FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures"
FIXTURE = FIXTURES / "imagenet_d_scorer_grid.npz"
PROMPTS = FIXTURES / "imagenet_d_prompts.json"
CONVERSATION = "LLaVA/llava/conversation.py"
QUESTIONS = (
    "What is the main object in this image? Choose from the following list: backpack, banana.",
    "What is the main object in this image? Choose from the following list: pen, can opener.",
)
_PROMPTS = """
import json, runpy, sys
conv = runpy.run_path(sys.argv[1])["conv_templates"]
out = {}
for name in json.loads(sys.argv[2]):
    out[name] = []
    for q in json.loads(sys.argv[3]):
        c = conv[name].copy()
        c.append_message(c.roles[0], "<image>\\n" + q)
        c.append_message(c.roles[1], None)
        out[name].append(c.get_prompt())
print(json.dumps(out))
"""
CODES = {"LLaVa TRUE": 0, "LLaVa FALSE": 1, "LLaVa DOUBLE": 2, "LLaVa TODO": 3}

# Answer forms: the truth alone, the distractor alone (bare and in a sentence), both, the
# truth's first variant (else the truth) in capitals (the answer is lower-cased), and the
# truth less its last letter (mostly naming neither option).
ANSWERS = (
    "{gt}",
    "{d}",
    "The main object in this image is a {gt}.",
    "The main object in this image is a {d}.",
    "I see a {gt} and a {d}.",
    "A {GT_ALIAS}.",
    "Maybe a {gt_cut}",
)

# Runs the official file as it is, with os.walk answering with the grid's folder only.
_RUNNER = """
import os, runpy, sys
grid = sys.argv[2]
os.walk = lambda _root, *a, **k: iter([(grid, [], ["LLava_predictions.csv"])])
runpy.run_path(sys.argv[1], run_name="__main__")
"""


def class_texts() -> list[str]:
    """ImageNet-D's 113 class texts as its questions write them (the CLIP names)."""
    from robustlab.data.labels import get_label_space
    from robustlab.models.open_clip_models import imagenet_d_clip_name

    return [imagenet_d_clip_name(c) for c in get_label_space("imagenet-d").classes]


def alias(gt: str) -> str:
    """The first variant of the published scorer's mapping for ``gt``, else ``gt``."""
    from robustlab.workflows.imagenet_d.vlm.scoring import VARIANTS

    return (VARIANTS.get(gt) or (gt,))[0]


def answer(form: str, gt: str, d: str) -> str:
    return form.format(gt=gt, d=d, GT_ALIAS=alias(gt).upper(), gt_cut=gt[:-1])


def grid(classes: list[str]):
    """(truth index, distractor index, form index, answer) for the whole grid, in order."""
    for i, gt in enumerate(classes):
        for j, d in enumerate(classes):
            if i == j:
                continue
            for k, form in enumerate(ANSWERS):
                yield i, j, k, answer(form, gt, d)


def _git(mirror: Path, *args: str) -> bytes:
    return subprocess.run(["git", "-C", str(mirror), *args], check=True, capture_output=True).stdout


def official_prompts(mirror: Path) -> dict:
    """{template: [prompt per QUESTIONS]} from the official conversation.py."""
    import json

    from robustlab.models.vlm import CONVERSATIONS

    blob = _git(mirror, "rev-parse", f"HEAD:{CONVERSATION}").decode().strip()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "conversation.py"
        path.write_bytes(_git(mirror, "show", f"HEAD:{CONVERSATION}"))
        out = subprocess.run(
            [
                sys.executable,
                "-c",
                _PROMPTS,
                str(path),
                json.dumps(list(CONVERSATIONS)),
                json.dumps(QUESTIONS),
            ],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    return {
        "source": f"{CONVERSATION} blob {blob}",
        "questions": list(QUESTIONS),
        "prompts": json.loads(out),
    }


def official_verdicts(mirror: Path, classes: list[str]) -> tuple[np.ndarray, str]:
    """Verdict codes (N x N x len(ANSWERS), 255 on the diagonal) from the official script."""
    blob = subprocess.run(
        ["git", "-C", str(mirror), "rev-parse", f"HEAD:{SCRIPT}"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    source = subprocess.run(
        ["git", "-C", str(mirror), "show", f"HEAD:{SCRIPT}"], check=True, capture_output=True
    ).stdout
    rows = list(grid(classes))
    with tempfile.TemporaryDirectory() as tmp:
        code, data = Path(tmp) / "official", Path(tmp) / "results" / "grid" / "model"
        code.mkdir()
        data.mkdir(parents=True)
        (code / "compute_accuracy.py").write_bytes(source)
        with open(data / "LLava_predictions.csv", "w", newline="") as f:
            w = csv.writer(f, delimiter="\t")
            w.writerow(["image_dir", "gt_category", "pred_category", "question", "answer"])
            for i, j, k, text in rows:
                w.writerow([f"{i}/{j}/{k}", classes[i], classes[j], "q", text])
        subprocess.run(
            [sys.executable, "-c", _RUNNER, str(code / "compute_accuracy.py"), str(data)],
            check=True,
            cwd=tmp,
        )
        with open(data / "LLava_predictions_formated.csv", newline="") as f:
            out = list(csv.DictReader(f, delimiter="\t"))
    if len(out) != len(rows):
        raise SystemExit(f"the official script scored {len(out)} of {len(rows)} answers")
    n = len(classes)
    verdicts = np.full((n, n, len(ANSWERS)), 255, dtype=np.uint8)
    for (i, j, k, text), row in zip(rows, out):
        if row["answer"] != text or row["gt_category"] != classes[i]:
            raise SystemExit(f"row order changed at {classes[i]!r}/{classes[j]!r}/{k}")
        verdicts[i, j, k] = CODES[row["LLaVa_correct"]]
    return verdicts, blob


def robustlab_verdicts(classes: list[str], rule: str) -> np.ndarray:
    from robustlab.workflows.imagenet_d.vlm.scoring import score_answer

    n = len(classes)
    out = np.full((n, n, len(ANSWERS)), 255, dtype=np.uint8)
    for i, j, k, text in grid(classes):
        v = score_answer(text, classes[i], classes[j], rule=rule)
        out[i, j, k] = (
            {"both": 2, "neither": 3}[v.dropped] if v.dropped else (0 if v.correct else 1)
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--mirror", type=Path, default=MIRROR, help="git dir of chenshuang-zhang/imagenet_d"
    )
    ap.add_argument("--out", type=Path, default=FIXTURE)
    args = ap.parse_args()
    classes = class_texts()
    verdicts, blob = official_verdicts(args.mirror, classes)
    np.savez_compressed(
        args.out,
        classes=np.array(classes),
        answers=np.array(ANSWERS),
        aliases=np.array([alias(c) for c in classes]),
        verdicts=verdicts,
        source=np.array(f"{SCRIPT} blob {blob}"),
    )
    cells = verdicts != 255
    print(f"{int(cells.sum())} answers scored by {SCRIPT} (blob {blob[:12]}) -> {args.out}")
    names = {v: k for k, v in CODES.items()}
    for code in range(4):
        print(f"  {names[code]:13s} {int((verdicts == code).sum())}")
    for rule in ("official", "nested"):
        mine = robustlab_verdicts(classes, rule)
        diff = np.argwhere((mine != verdicts) & cells)
        pairs = sorted({(classes[i], classes[j]) for i, j, _ in diff})
        print(f"robustlab rule {rule!r}: {len(diff)} verdicts differ over {len(pairs)} pairs")
        for gt, d in pairs[:12]:
            print(f"    {gt} / {d}")
    import json

    from robustlab.models.vlm import CONVERSATIONS

    prompts = official_prompts(args.mirror)
    PROMPTS.write_text(json.dumps(prompts, indent=1) + "\n")
    same = sum(
        CONVERSATIONS[name].prompt(q) == want
        for name, texts in prompts["prompts"].items()
        for q, want in zip(QUESTIONS, texts)
    )
    print(
        f"prompts of {len(prompts['prompts'])} templates -> {PROMPTS}; robustlab's equal: "
        f"{same} of {len(prompts['prompts']) * len(QUESTIONS)}"
    )


if __name__ == "__main__":
    main()
