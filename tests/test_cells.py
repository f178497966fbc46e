"""The one cell type (:mod:`robustlab.cells`): a (shift, level) value whose ``key`` is the
level's text, exactly what the store, the level folders and the manifests have always held
(``str(level)``), so that moving every caller onto it changed no stored byte."""

from __future__ import annotations

import pickle
import re
from pathlib import Path

import robustlab
from robustlab.cells import Cell, as_cells, cells_record, level_key, level_named
from robustlab.data.sources import Sample
from robustlab.pipeline import cell_path
from robustlab.execution.tasks import Task
from robustlab.shifts.registry import get_shift, list_shifts
from robustlab.store import CLEAN_CELL, CLEAN_LEVEL, CLEAN_SHIFT
from robustlab.suites import get_suite, select_cells


def test_key_is_the_stored_text_of_int_float_and_named_levels():
    assert Cell("gaussian_noise", 3).key == "3"
    assert Cell("x", 0.1).key == "0.1"
    # ImageNet-E's size levels are names: "0.10" stays "0.10", never the float's "0.1"
    levels = get_shift("obj_size").levels
    assert [Cell("obj_size", lv).key for lv in levels] == ["0.10", "0.08", "0.05"]
    assert Cell("obj_direction", "90").key == "90"
    assert CLEAN_CELL == (CLEAN_SHIFT, 0) and CLEAN_CELL.key == CLEAN_LEVEL == "0"
    assert level_key(level_key(0.1)) == "0.1"  # a key given back is itself


def test_every_registered_level_keeps_its_spelling():
    """Every level of every registered shift: its key is the text stored since the first
    run (``str(level)``), a named level's key is the name itself, and the key leads back
    to the level."""
    for shift in list_shifts():
        for lv in shift.levels:
            cell = Cell(shift.name, lv)
            assert cell.key == str(lv)
            if isinstance(lv, str):
                assert cell.key == lv
            assert level_named(cell.key, shift.levels) == lv
    assert level_named("6", get_shift("gaussian_noise").levels) is None


def test_the_level_folder_generate_writes_is_the_key(tmp_path):
    sample = Sample(id="n01440764/a.JPEG", path=tmp_path / "a.JPEG", class_name="n01440764")
    protocol = get_suite("imagenet-e").protocol
    for cell in get_suite("imagenet-e").cells():
        path = cell_path(tmp_path, sample, cell.shift, cell.level, protocol)
        assert path.relative_to(tmp_path).parts[:2] == (cell.shift, cell.key)
        assert path.relative_to(tmp_path).as_posix().startswith(cell.folder + "/")


def test_a_cell_is_a_plain_pair_to_unpack_compare_and_hash():
    cell = Cell("obj_size", "0.10")
    shift, level = cell
    assert (shift, level) == ("obj_size", "0.10") and cell[1] == "0.10"
    assert cell == ("obj_size", "0.10") and hash(cell) == hash(("obj_size", "0.10"))
    assert {("obj_size", "0.10"): 1}[cell] == 1
    assert cell.stored == ("obj_size", "0.10") and cell.folder == "obj_size/0.10"
    assert Cell("gaussian_noise", 2).stored == ("gaussian_noise", "2")
    try:
        cell.level = "0.08"  # type: ignore[misc]
    except AttributeError:
        pass
    else:
        raise AssertionError("a Cell must be immutable")


def test_cells_pickle_and_tasks_hold_cells():
    cells = [Cell("gaussian_noise", 3), Cell("obj_size", "0.10"), CLEAN_CELL]
    back = pickle.loads(pickle.dumps(cells))
    assert back == cells and all(type(c) is Cell for c in back)
    assert [c.key for c in back] == ["3", "0.10", "0"]
    # a task made from plain pairs holds Cells, and keeps them through a worker's pickle
    task = pickle.loads(pickle.dumps(Task(0, (("gaussian_noise", 3), ("obj_size", "0.10")))))
    assert all(type(c) is Cell for c in task.cells)
    assert [c.stored for c in task.cells] == [("gaussian_noise", "3"), ("obj_size", "0.10")]
    # a group that already holds cells is shared by the tasks, not copied per task
    group = as_cells([("gaussian_noise", 3), ("obj_size", "0.10")])
    assert Task(1, group).cells is group and as_cells(group) is group


def test_selections_give_cells_and_records_spell_their_keys():
    sel = get_suite("imagenet-c").select(["gaussian_noise"], "2-3")
    assert all(type(c) is Cell for c in sel.cells)
    assert cells_record([CLEAN_CELL, *sel.cells]) == [
        ["clean", "0"],
        ["gaussian_noise", "2"],
        ["gaussian_noise", "3"],
    ]
    folders = [("obj_size", "0.10"), ("obj_size", "0.08"), ("obj_direction", "90")]
    chosen = select_cells(folders, None, "0.10,90", where="the archive")
    assert chosen == [("obj_size", "0.10"), ("obj_direction", "90")]
    assert all(type(c) is Cell for c in chosen)
    assert as_cells(folders)[0].key == "0.10"


def test_no_module_spells_a_level_itself():
    """Levels are turned into text by :mod:`robustlab.cells` only: a new ``str(level)``
    elsewhere is a second spelling that could drift from the stored one."""
    root = Path(robustlab.__file__).parent
    level = r"level|lv|lvl|cell\[1\]|[a-z_]+\.level|[a-z_]+\[\"level\"\]|[a-z_]+\.get\(\"level\"\)"
    pattern = re.compile(rf"str\((?:{level})\)")
    found = [
        f"{path.relative_to(root)}:{n}"
        for path in sorted(root.rglob("*.py"))
        if path.name != "cells.py"
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if pattern.search(line) and not line.lstrip().startswith("#")
    ]
    assert not found, "use Cell.key or robustlab.cells.level_key: " + ", ".join(found)
