"""robustlab's ImageNet-D answer scorer against the published one, on the full grid.

The fixture holds the verdicts of ImageNet-D's own ``LLaVA/compute_accuracy.py`` (run by
``benchmarks/imagenet_d_scorer.py`` on every ordered class pair x 7 answer forms); here
:func:`robustlab.workflows.imagenet_d.vlm.scoring.score_answer` scores the same answers.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from robustlab.errors import InputError
from robustlab.workflows.imagenet_d.vlm.scoring import score_answer

FIXTURE = Path(__file__).parent / "fixtures" / "imagenet_d_scorer_grid.npz"
CODE = {None: None, "both": 2, "neither": 3}


@pytest.fixture(scope="module")
def grid():
    with np.load(FIXTURE) as f:
        return {k: f[k] for k in f.files}


def _verdicts(grid, rule: str) -> np.ndarray:
    classes, forms, aliases = (list(map(str, grid[k])) for k in ("classes", "answers", "aliases"))
    out = np.full(grid["verdicts"].shape, 255, dtype=np.uint8)
    for i, gt in enumerate(classes):
        for j, d in enumerate(classes):
            if i == j:
                continue
            for k, form in enumerate(forms):
                text = form.format(gt=gt, d=d, GT_ALIAS=aliases[i].upper(), gt_cut=gt[:-1])
                v = score_answer(text, gt, d, rule=rule)
                out[i, j, k] = CODE[v.dropped] if v.dropped else (0 if v.correct else 1)
    return out


def test_grid_covers_every_class_pair_and_every_verdict(grid):
    from robustlab.data.labels import get_label_space
    from robustlab.models.open_clip_models import imagenet_d_clip_name

    names = [imagenet_d_clip_name(c) for c in get_label_space("imagenet-d").classes]
    assert list(map(str, grid["classes"])) == names
    v = grid["verdicts"]
    n = len(names)
    assert v.shape[:2] == (n, n) and (v != 255).sum() == n * (n - 1) * len(grid["answers"])
    assert set(np.unique(v[v != 255])) == {0, 1, 2, 3}


def test_official_rule_gives_the_published_scorer_verdicts_on_the_whole_grid(grid):
    mine = _verdicts(grid, "official")
    wrong = np.argwhere(mine != grid["verdicts"])
    classes = grid["classes"]
    assert not len(wrong), [(str(classes[i]), str(classes[j]), int(k)) for i, j, k in wrong[:5]]


def test_nested_rule_differs_only_where_one_option_hides_inside_the_other(grid):
    mine = _verdicts(grid, "nested")
    diff = np.argwhere(mine != grid["verdicts"])
    assert len(diff)  # "pen" inside "laptop (open)": the published scorer drops these
    classes = list(map(str, grid["classes"]))
    for i, j, _ in diff:
        g, d = classes[i], classes[j]
        assert g in d or d in g
        assert grid["verdicts"][i, j, _] == 2  # only answers the published one drops as both


def test_unknown_rule_is_a_user_error():
    with pytest.raises(InputError, match="scoring rule"):
        score_answer("a pen", "pen", "cup", rule="lenient")
