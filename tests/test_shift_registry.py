"""One registry of shifts: a batched version, its inputs and its random parts are fields of
the shift's own entry, and nothing else in ``robustlab.shifts`` keeps a table of them."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys

import numpy as np
import pytest
import torch

import robustlab.shifts
from robustlab.shifts.registry import (
    BATCHED_INPUTS,
    RandomParts,
    get_shift,
    list_shifts,
    register_batched,
    register_shift,
)


def _entries() -> list:
    return [get_shift(sh.name, batched=True) for sh in list_shifts()]


def test_batched_registration_fails_loudly():
    with pytest.raises(ValueError, match="no registered shift"):
        register_batched("no_such_shift")(lambda x, p, gens: x)
    before = get_shift("gaussian_blur", batched=True).batched
    with pytest.raises(ValueError, match="already has a batched version"):
        register_batched("gaussian_blur")(lambda x, p, gens: x)
    assert get_shift("gaussian_blur").batched is before  # the entry is unchanged
    with pytest.raises(ValueError, match="unknown inputs"):
        register_batched("blur_bg", needs=("mask",))
    with pytest.raises(TypeError, match="both draw and replay"):
        register_batched("gaussian_noise", draw=lambda x, p, g: {})


def test_a_moved_target_needs_its_draw():
    with pytest.raises(ValueError, match="needs the draw"):
        register_shift("moved_without_draw", family="test", params={1: 1}, target="moved")
    assert "moved_without_draw" not in {sh.name for sh in list_shifts()}


def test_the_entries_hold_the_batched_versions():
    entries = _entries()
    batched = {sh.name: sh for sh in entries if sh.batched is not None}
    # 18 of the 19 ImageNet-C corruptions (not spatter) and the 15 mask scenes
    assert len(batched) == 18 + 15 and "spatter" not in batched
    for sh in batched.values():
        assert set(sh.batched_needs) <= set(BATCHED_INPUTS), sh.name
        assert bool(sh.batched_needs) == bool({"ximagenet12", "imagenet9"} & sh.tags), sh.name
        if sh.parts is not None:  # a random one: the version is its draw then its apply
            assert isinstance(sh.parts, RandomParts) and sh.batched is sh.parts
            assert not sh.deterministic, sh.name
    for sh in entries:
        if sh.batched is None:
            assert sh.parts is None and not sh.batched_needs, sh.name


def test_random_parts_compose_draw_and_apply():
    sh = get_shift("impulse_noise", batched=True)
    x = torch.randint(0, 256, (2, 3, 8, 8), dtype=torch.uint8)
    gens = [torch.Generator().manual_seed(s) for s in (1, 2)]
    again = [torch.Generator().manual_seed(s) for s in (1, 2)]
    params = sh.params[3]
    expect = sh.parts.apply(x, params, sh.parts.draw(x, params, again))
    assert torch.equal(sh.batched(x, params, gens), expect)


def _shift_modules():
    for info in pkgutil.walk_packages(robustlab.shifts.__path__, "robustlab.shifts."):
        yield importlib.import_module(info.name)


def test_no_other_table_of_shift_implementations():
    """A dict keyed by shift names whose values are functions is a second registry: the
    entry's fields (``batched``, ``parts``, ``draw``, ``target``) are the one place."""
    names = {sh.name for sh in _entries()}
    tables = []
    for module in _shift_modules():
        if module.__name__ == "robustlab.shifts.registry":
            continue
        for attr, value in vars(module).items():
            if isinstance(value, dict) and len(set(value) & names) >= 2:
                if any(callable(v) or isinstance(v, RandomParts) for v in value.values()):
                    tables.append(f"{module.__name__}.{attr}")
    assert not tables


@pytest.mark.slow  # a fresh interpreter importing every shift family, then torch: ~10 s
def test_the_registry_alone_stays_light():
    """Exact shifts and their entries without torch; the batched fields on demand."""
    code = (
        "import sys\n"
        "from robustlab.shifts.registry import get_shift\n"
        "sh = get_shift('color_r')\n"
        "assert sh.draw is not None and sh.batched is None, sh\n"
        "assert 'torch' not in sys.modules\n"
        "assert get_shift('color_r', batched=True).parts is not None\n"
        "assert 'torch' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_moved_mask_is_the_draws_offset():
    from robustlab.seeding import make_rng
    from robustlab.shifts.scenes import moved_mask

    mask = np.zeros((20, 30), bool)
    mask[4:9, 6:10] = True
    mask[5, 12] = True  # the box is (6, 4, 13, 9)
    sh = get_shift("random_bg")
    offsets = set()
    for seed in range(20):
        dx, dy = sh.draw(
            np.zeros((20, 30, 3), np.uint8), sh.params["add"], make_rng(seed), {"mask": mask}
        )["offset"]
        moved = moved_mask(mask, (dx, dy))
        assert np.array_equal(np.argwhere(moved), np.argwhere(mask) + (dy, dx))
        assert 0 <= 6 + dx and 13 + dx <= 30 and 0 <= 4 + dy and 9 + dy <= 20
        offsets.add((dx, dy))
    assert len(offsets) > 10
    with pytest.raises(ValueError, match="off the image"):
        moved_mask(mask, (20, 0))


def test_resources_are_described_in_family_order_whatever_was_imported_first():
    """A manifest writes one key per described resource in this order; a process that
    imported the attribute edits before the generative shifts (a test, a user script) must
    write the same bytes as a fresh one."""
    from robustlab.shifts import registry

    keys = registry.described_resources()
    assert keys.index("inpainter") < keys.index("hole_fill")  # generative before attributes
    # the attribute family registered first, the others after it in their own order
    items = list(registry._RESOURCES.items())
    early = dict(
        [kv for kv in items if kv[0] == "hole_fill"] + [kv for kv in items if kv[0] != "hole_fill"]
    )
    assert list(early)[0] == "hole_fill"
    assert [k for k in registry._in_family_order(early) if early[k].describe] == keys
