"""An output folder that is not empty and was not made by the same command is refused
(``--into-existing`` writes into it anyway), and the demo never writes into a folder it did
not create (issue 36, item 3): ``robustlab demo --out my_dataset/`` added ``data/``,
``masks/``, a database and ``report.html`` to a dataset, which then failed to evaluate.
Real photos throughout."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import _runs_helpers as h  # noqa: E402

REFUSED = "is not empty and was not made by robustlab"


def _dataset(root: Path, n: int = 2) -> Path:
    """A user's ImageFolder dataset of ``n`` real photos (and a README beside them)."""
    for r in h.photo_rows(n):
        (root / r["wnid"]).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(h.MINI / r["file"], root / r["wnid"] / r["file"])
    (root / "README.txt").write_text("my dataset\n")
    return root


def _listing(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _refused(capsys, argv, folder: Path, command: str) -> str:
    before = _listing(folder)
    code, _, err = h.cli(capsys, *argv)
    lines = [line for line in err.splitlines() if ": error:" in line]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert f"{REFUSED} {command}" in lines[0], lines[0]
    assert _listing(folder) == before  # nothing added, nothing replaced
    return err


def test_demo_never_writes_into_a_dataset(tmp_path, capsys):
    dataset = _dataset(tmp_path / "my_dataset")
    err = _refused(capsys, ["demo", "--out", dataset], dataset, "demo")
    assert "--into-existing" not in err  # the demo has no way in: it needs its own folder


def test_the_demo_api_refuses_too_and_resumes_in_its_own_folder(tmp_path):
    from robustlab.workflows.demo import STATE_NAME, run_demo
    from robustlab.errors import InputError
    from robustlab.files.safety import OWNER_MARK

    dataset = _dataset(tmp_path / "my_dataset")
    before = _listing(dataset)
    kw = {"photos": 1, "corruptions": ["contrast"], "levels": [1], "scenarios": []}
    kw.update(report=False, workers=0)
    with pytest.raises(InputError, match=REFUSED):
        run_demo(dataset, **kw)
    assert _listing(dataset) == before
    out = tmp_path / "demo"
    assert run_demo(out, **kw) == 0
    assert (out / OWNER_MARK).is_file() and (out / STATE_NAME).is_file()
    assert run_demo(out, **kw) == 0  # its own folder: resumed
    (out / OWNER_MARK).unlink()  # a demo folder from before the mark: its state says so
    assert run_demo(out, **kw) == 0


def test_generate_into_another_folder_needs_into_existing(tmp_path, capsys):
    data = h.flat_folder(tmp_path / "flat", 1)
    other = _dataset(tmp_path / "other")
    argv = ["generate", "imagenet-c", "--data", data, "--out", other, "--shift", "contrast"]
    argv += ["--level", "1", "--workers", "0", "--no-progress"]
    _refused(capsys, argv, other, "generate")
    code, _, err = h.cli(capsys, *argv, "--into-existing")
    assert code == 0 and (other / "manifest.json").is_file(), err
    assert (other / "README.txt").read_text() == "my dataset\n"
    code, _, err = h.cli(capsys, *argv)  # now it holds generate's manifest: a rerun
    assert code == 0, err


def test_the_generate_api_refuses_another_folder_too(tmp_path):
    from robustlab.errors import InputError
    from robustlab.workflows.generate import generate

    data = h.flat_folder(tmp_path / "flat", 1)
    other = _dataset(tmp_path / "other")
    before = _listing(other)
    kw = {"shifts": ["contrast"], "levels": [1], "workers": 0, "progress": False}
    with pytest.raises(InputError, match=f"{REFUSED} generate"):
        generate("imagenet-c", data, other, **kw)
    assert _listing(other) == before
    generate("imagenet-c", data, other, into_existing=True, **kw)
    assert (other / "manifest.json").is_file()


def test_masks_refuses_another_folder_and_resumes_its_own(tmp_path, capsys):
    data = tmp_path / "data"
    row = h.photo_rows(1)[0]
    (data / row["wnid"]).mkdir(parents=True)
    shutil.copyfile(h.MINI / row["file"], data / row["wnid"] / row["file"])
    boxes = tmp_path / "boxes.csv"
    boxes.write_text(f"file,x0,y0,x1,y1\n{row['wnid']}/{row['file']},20,20,200,200\n")
    other = _dataset(tmp_path / "pngs")
    argv = ["masks", "--data", data, "--bboxes", boxes, "--max-side", "64", "--no-progress"]
    _refused(capsys, [*argv, "--out", other], other, "masks")
    out = tmp_path / "masks"
    code, _, err = h.cli(capsys, *argv, "--out", out)
    assert code == 0, err
    # An interrupted run leaves masks without masks_quality.json: still its own folder.
    for record in out.glob("masks_quality.*"):
        record.unlink()
    code, _, err = h.cli(capsys, *argv, "--out", out)
    assert code == 0 and (out / "masks_quality.json").is_file(), err


@pytest.mark.parametrize(
    ("argv", "command"),
    [
        (["data", "icons", "--out"], "data icons"),
        (["data", "tiny-checkpoints", "--out"], "data tiny-checkpoints"),
        (["synth", "--checkpoint", "nowhere", "--out"], "synth"),
    ],
)
def test_every_folder_filling_command_refuses_another_folder(tmp_path, capsys, argv, command):
    other = _dataset(tmp_path / "other", 1)
    err = _refused(capsys, [*argv, other], other, command)
    assert "--into-existing" in err


def test_mine_refuses_another_folder_before_any_surrogate_runs(tmp_path, capsys):
    """mine refused a foreign --out only after its surrogates had run."""
    data = h.flat_folder(tmp_path / "flat", 1)
    other = _dataset(tmp_path / "other", 1)
    db = tmp_path / "m.duckdb"
    argv = ["mine", "--data", data, "--out", other, "--db", db, "--surrogates", "lite0"]
    _refused(capsys, argv, other, "mine")
    assert not db.exists()


def test_hidden_files_alone_do_not_make_a_folder_foreign(tmp_path):
    from robustlab.files.safety import check_out_folder

    folder = tmp_path / "fresh"
    folder.mkdir()
    (folder / ".DS_Store").write_bytes(b"\0")
    os.mkdir(folder / ".ipynb_checkpoints")
    check_out_folder(folder, command="generate", flag="--out")  # no error
