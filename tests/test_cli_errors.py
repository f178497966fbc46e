"""The error contract through the real CLI (issue 8).

A user-facing error (:class:`robustlab.errors.RobustlabError`) prints as one line
``robustlab CMD: error: ...`` plus an optional ``  hint: ...`` and exits with the error's
code (2 input, 3 store or environment); anything else is a bug: ``internal error`` plus
the traceback, exit 70. Every case here printed a traceback, a misleading message or
exited 0 before.

Fixtures are made in the tests (noise photos, a database written by ``evaluate``), so
nothing here needs ../shared/data. Conditions that need root (a tmpfs for a full disk, a
read-only bind mount) are skipped with a reason where they cannot be made.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from robustlab import cli
from robustlab.errors import InputError

CLASSES = ("n01440764", "n01443537")


def run_cli(capsys, *argv: str) -> tuple[int, list[str], str]:
    """(exit status, stderr lines without logging, stdout) of ``robustlab ARGV``."""
    rc = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    lines = [
        ln
        for ln in err.splitlines()
        if ln.strip() and not ln.startswith(("INFO ", "WARNING ", "DEBUG "))
    ]
    return rc, lines, out


def assert_one_line_error(lines: list[str], command: str, *needles: str) -> None:
    """The error is one ``robustlab CMD: error:`` line (plus at most a hint), no traceback."""
    text = "\n".join(lines)
    assert "Traceback" not in text, text
    errors = [ln for ln in lines if ln.startswith(f"robustlab {command}: error: ")]
    assert len(errors) == 1, text
    hints = [ln for ln in lines if ln.startswith("  hint: ")]
    assert len(hints) <= 1, text
    for needle in needles:
        assert needle in errors[0], errors[0]


def make_photos(root: Path, per_class: int = 2, size=(96, 120)) -> Path:
    rng = np.random.default_rng(0)
    for wnid in CLASSES:
        (root / wnid).mkdir(parents=True)
        for i in range(per_class):
            pixels = (rng.random((*size, 3)) * 255).astype(np.uint8)
            Image.fromarray(pixels).save(root / wnid / f"img{i}.png")
    return root


@pytest.fixture(scope="module")
def photos(tmp_path_factory) -> Path:
    return make_photos(tmp_path_factory.mktemp("photos") / "data")


@pytest.fixture(scope="module")
def good_db(photos, tmp_path_factory) -> Path:
    """A real results database: lite0 on the clean photos."""
    db = tmp_path_factory.mktemp("db") / "r.duckdb"
    assert (
        cli.main(
            [
                "evaluate",
                "lite0",
                "--data",
                str(photos),
                "--db",
                str(db),
                "--workers",
                "0",
                "--no-progress",
            ]
        )
        == 0
    )
    return db


def corrupt_copy(good: Path, dest: Path, how: str) -> Path:
    data = good.read_bytes()
    if how == "truncated":
        dest.write_bytes(data[: len(data) // 3])
    elif how == "text":
        dest.write_text("this is not a database\n" * 50)
    elif how == "empty":
        dest.write_bytes(b"")
    elif how == "garbled":
        rng = np.random.default_rng(1)
        mid = len(data) // 2
        dest.write_bytes(
            data[:mid] + rng.integers(0, 256, len(data) - mid, dtype=np.uint8).tobytes()
        )
    return dest


# ------------------------------------------------------------------ the contract itself


def test_a_bug_prints_as_internal_error_with_traceback(monkeypatch, capsys):
    """A plain ValueError from inside robustlab is a bug, not bad input (it used to print
    as ``error:`` with exit 2, so bugs looked like the user's fault)."""
    from robustlab.commands import list_cmd

    def broken(args):
        raise ValueError("an index went wrong")

    monkeypatch.setattr(list_cmd, "run", broken)
    rc, lines, _ = run_cli(capsys, "list", "shifts")
    assert rc == cli.EXIT_INTERNAL == 70
    assert lines[0] == (
        "robustlab list: internal error (a bug, please report it): ValueError: an index went wrong"
    )
    assert any(ln.startswith("Traceback") for ln in lines)


def test_user_error_is_one_line_with_a_hint(tmp_path, capsys):
    rc, lines, _ = run_cli(capsys, "results", "--db", tmp_path / "none.duckdb")
    assert rc == 2
    assert_one_line_error(lines, "results", "no results database", "none.duckdb")
    assert lines[-1].startswith("  hint: ") and "robustlab evaluate" in lines[-1]


def test_user_error_alias_is_input_error():
    assert cli.UserError is InputError and issubclass(InputError, ValueError)


# ------------------------------------------------------------------ damaged databases


@pytest.mark.parametrize("how", ["truncated", "text", "empty", "garbled"])
def test_results_on_a_damaged_database(good_db, tmp_path, capsys, how):
    db = corrupt_copy(good_db, tmp_path / "bad.duckdb", how)
    rc, lines, _ = run_cli(capsys, "results", "--db", db)
    assert rc == 3
    assert_one_line_error(lines, "results", str(db))


def test_every_command_that_opens_the_database_names_a_damaged_one(
    photos, good_db, tmp_path, capsys
):
    db = corrupt_copy(good_db, tmp_path / "bad.duckdb", "truncated")
    masks = tmp_path / "masks"
    for wnid in CLASSES:
        (masks / wnid).mkdir(parents=True)
        for f in (photos / wnid).iterdir():
            m = np.zeros((96, 120), np.uint8)
            m[20:70, 30:90] = 255
            Image.fromarray(m).save(masks / wnid / f.name)
    weights = tmp_path / "seg.pth"
    weights.write_bytes(b"not read: the database is checked first")
    commands = {
        "evaluate": [
            "evaluate",
            "lite0",
            "--data",
            photos,
            "--db",
            db,
            "--workers",
            "0",
            "--no-progress",
        ],
        "results": ["results", "--db", db],
        "report": ["report", "--db", db, "--out", tmp_path / "r.html"],
        "segment": [
            "segment",
            "torchvision:lraspp_mobilenet_v3_large",
            "--weights",
            weights,
            "--data",
            photos,
            "--masks",
            masks,
            "--db",
            db,
        ],
        "train": [
            "train",
            "lite0",
            "--data",
            photos,
            "--masks",
            masks,
            "--db",
            db,
            "--steps",
            "1",
            "--out",
            tmp_path / "ckpt",
        ],
    }
    for name, argv in commands.items():
        rc, lines, _ = run_cli(capsys, *argv)
        assert rc == 3, (name, lines)
        assert_one_line_error(lines, name, str(db), "cannot be read")
    assert (
        db.read_bytes()
        == corrupt_copy(good_db, tmp_path / "again.duckdb", "truncated").read_bytes()
    )


def test_a_duckdb_file_of_another_program(tmp_path, capsys):
    import duckdb

    db = tmp_path / "other.duckdb"
    con = duckdb.connect(str(db))
    con.execute("CREATE TABLE t AS SELECT 1 AS x")
    con.close()
    rc, lines, _ = run_cli(capsys, "results", "--db", db)
    assert rc == 3
    assert_one_line_error(lines, "results", "not a robustlab results database")


# ------------------------------------------------------------------ paths


def test_generate_out_naming_a_file(photos, tmp_path, capsys):
    out = tmp_path / "notes.txt"
    out.write_text("keep me")
    rc, lines, _ = run_cli(
        capsys,
        "generate",
        "imagenet-c",
        "--data",
        photos,
        "--out",
        out,
        "--shifts",
        "gaussian_noise",
        "--levels",
        "1",
        "--quiet",
    )
    assert rc == 2
    assert_one_line_error(lines, "generate", str(out), "is a file")
    assert out.read_text() == "keep me"
    # and a folder below a file
    rc, lines, _ = run_cli(
        capsys,
        "generate",
        "imagenet-c",
        "--data",
        photos,
        "--out",
        out / "sub",
        "--shifts",
        "gaussian_noise",
        "--levels",
        "1",
        "--quiet",
    )
    assert rc == 2
    assert_one_line_error(lines, "generate", "not a folder")


def test_results_export_to_a_file(good_db, tmp_path, capsys):
    """``--export`` takes a folder; a file there used to end in a FileExistsError traceback."""
    target = tmp_path / "out.parquet"
    target.write_text("keep me")
    rc, lines, _ = run_cli(capsys, "results", "--db", good_db, "--export", target)
    assert rc == 2
    assert_one_line_error(lines, "results", str(target), "is a file")
    assert target.read_text() == "keep me"
    rc, lines, _ = run_cli(capsys, "results", "--db", good_db, "--export", target / "sub")
    assert rc == 2
    assert_one_line_error(lines, "results", "not a folder")


@contextmanager
def read_only_folder(path: Path):
    """Make ``path`` read-only for this process: chmod for a normal user; a read-only bind
    mount for root (root ignores permissions); skip when neither works."""
    if os.geteuid() != 0:
        path.chmod(0o555)
        try:
            yield path
        finally:
            path.chmod(0o755)
        return
    view = path.with_name(path.name + "-ro")
    view.mkdir()
    bind = subprocess.run(
        ["mount", "--bind", str(path), str(view)], capture_output=True, check=False
    )
    if bind.returncode != 0:
        view.rmdir()
        pytest.skip(f"root cannot make a read-only folder here: {bind.stderr.decode().strip()}")
    try:
        ro = subprocess.run(
            ["mount", "-o", "remount,bind,ro", str(view)], capture_output=True, check=False
        )
        if ro.returncode != 0:
            pytest.skip(f"cannot remount read-only: {ro.stderr.decode().strip()}")
        yield view
    finally:
        subprocess.run(["umount", "-l", str(view)], capture_output=True, check=False)
        view.rmdir()


def test_readers_need_no_lock_file_beside_a_read_only_database(photos, good_db, tmp_path, capsys):
    """A database in a read-only folder (a shared results folder) used to be unreadable:
    results and report created ``<db>.lock`` beside it."""
    folder = tmp_path / "shared"
    folder.mkdir()
    shutil.copy(good_db, folder / "r.duckdb")
    report_dir = tmp_path / "reports"
    report_dir.mkdir()
    with read_only_folder(folder) as ro:
        db = ro / "r.duckdb"
        assert not (ro / "r.duckdb.lock").exists()
        rc, lines, out = run_cli(capsys, "results", "--db", db, "--format", "csv")
        assert rc == 0, lines
        assert out.startswith("model,") and "lite0" in out
        rc, lines, _ = run_cli(
            capsys,
            "report",
            "--db",
            db,
            "--out",
            report_dir / "r.html",
            "--no-grid",
            "--resamples",
            "50",
        )
        assert rc == 0, lines
        assert (report_dir / "r.html").stat().st_size > 0
        # Writing into it is the environment's problem, said in one line.
        rc, lines, _ = run_cli(
            capsys,
            "generate",
            "imagenet-c",
            "--data",
            photos,
            "--out",
            ro / "gen",
            "--shifts",
            "gaussian_noise",
            "--quiet",
        )
        assert rc == 3
        assert_one_line_error(lines, "generate", str(ro / "gen"))
        rc, lines, _ = run_cli(capsys, "results", "--db", db, "--export", ro / "export")
        assert rc == 3
        assert_one_line_error(lines, "results", "export")


def test_evaluate_into_a_read_only_folder(photos, good_db, tmp_path, capsys):
    folder = tmp_path / "shared"
    folder.mkdir()
    with read_only_folder(folder) as ro:
        rc, lines, _ = run_cli(
            capsys,
            "evaluate",
            "lite0",
            "--data",
            photos,
            "--db",
            ro / "new.duckdb",
            "--workers",
            "0",
            "--no-progress",
        )
        assert rc == 3
        assert_one_line_error(lines, "evaluate")
        assert any(k in lines[0] for k in ("read-only", "permission denied")), lines


# ------------------------------------------------------------------ devices, workers, selections


def test_device_nonsense_lists_the_valid_devices(photos, tmp_path, capsys):
    rc, lines, _ = run_cli(
        capsys,
        "evaluate",
        "lite0",
        "--data",
        photos,
        "--db",
        tmp_path / "r.duckdb",
        "--device",
        "nonsense",
        "--workers",
        "0",
    )
    assert rc == 2
    assert_one_line_error(lines, "evaluate", "unknown device 'nonsense'")
    assert lines[-1].startswith("  hint: use one of: cpu")
    assert not (tmp_path / "r.duckdb").exists()


def test_device_cuda_without_a_gpu(photos, tmp_path, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU")
    rc, lines, _ = run_cli(
        capsys,
        "evaluate",
        "lite0",
        "--data",
        photos,
        "--db",
        tmp_path / "r.duckdb",
        "--device",
        "cuda",
        "--workers",
        "0",
    )
    assert rc == 3
    assert_one_line_error(lines, "evaluate", "no usable CUDA GPU")
    assert "cpu" in lines[-1]


@pytest.mark.parametrize(
    "argv",
    [
        ["evaluate", "lite0", "--db", "x.duckdb"],
        ["generate", "imagenet-c", "--out", "gen"],
        ["train", "lite0", "--db", "x.duckdb"],
    ],
)
def test_negative_workers_are_refused_by_every_command(photos, tmp_path, capsys, argv):
    """``--workers -1`` was accepted by evaluate (meaning in-process) and refused by generate."""
    with pytest.raises(SystemExit) as stop:
        cli.main([*argv, "--data", str(photos), "--workers", "-1"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert f"robustlab {argv[0]}: error: argument --workers: must be 0 or more, got -1" in err


def test_workers_meaning_is_in_help(capsys):
    for command, meaning in (
        ("evaluate", "0: all in the main process"),
        ("generate", "0: all in the main process"),
        ("train", "0: all in the main process"),
    ):
        with pytest.raises(SystemExit):
            cli.main([command, "--help"])
        assert meaning in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("flag", ["--shifts", "--levels"])
def test_a_blank_selection_does_not_mean_everything(photos, tmp_path, capsys, flag):
    """``--shifts ,`` used to generate the whole suite."""
    rc, lines, _ = run_cli(
        capsys,
        "generate",
        "imagenet-c",
        "--data",
        photos,
        "--out",
        tmp_path / "gen",
        flag,
        ",",
        "--quiet",
    )
    assert rc == 2
    assert_one_line_error(lines, "generate", "names no")
    assert not (tmp_path / "gen").exists()


def test_evaluate_fails_when_no_image_could_be_used(tmp_path, capsys):
    """Every photo unreadable: evaluate used to exit 0 with an empty table."""
    for wnid in CLASSES:
        (tmp_path / "data" / wnid).mkdir(parents=True)
        (tmp_path / "data" / wnid / "a.jpg").write_text("text, not a JPEG")
    rc, lines, _ = run_cli(
        capsys,
        "evaluate",
        "lite0",
        "--data",
        tmp_path / "data",
        "--db",
        tmp_path / "r.duckdb",
        "--workers",
        "0",
        "--no-progress",
    )
    assert rc == 1
    assert any("error: no image of" in ln and "a.jpg" in ln for ln in lines), lines


# ------------------------------------------------------------------ a full disk


@pytest.fixture
def small_disk(tmp_path):
    """A 1.5 MB tmpfs, or a skip where mounting is not permitted (not root, no CAP_SYS_ADMIN)."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    if shutil.which("mount") is None:
        pytest.skip("no mount command")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1536k", "tmpfs", str(mnt)],
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs: {done.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True, check=False)


def _fill(folder: Path, leave: int) -> None:
    """Fill the file system of ``folder`` up to ``leave`` free bytes."""
    st = os.statvfs(folder)
    free = st.f_bavail * st.f_frsize
    (folder / "ballast").write_bytes(b"\0" * max(0, free - leave))


def test_evaluate_on_a_full_disk_says_so(photos, small_disk, capsys):
    """It used to print "cannot rollback - no transaction is active"."""
    _fill(small_disk, 300_000)
    rc, lines, _ = run_cli(
        capsys,
        "evaluate",
        "lite0",
        "--data",
        photos,
        "--suite",
        "imagenet-c",
        "--shift",
        "gaussian_noise",
        "--db",
        small_disk / "r.duckdb",
        "--workers",
        "0",
        "--no-progress",
    )
    assert rc == 3
    assert_one_line_error(lines, "evaluate", "no space left on device")
    assert "rollback" not in lines[0]


def test_generate_on_a_full_disk_stops_with_one_line(photos, small_disk, capsys):
    """It used to count every later cell as failed and exit 0, or crash writing the manifest."""
    _fill(small_disk, 40_000)
    rc, lines, _ = run_cli(
        capsys,
        "generate",
        "imagenet-c",
        "--data",
        photos,
        "--out",
        small_disk / "gen",
        "--workers",
        "0",
        "--quiet",
    )
    assert rc == 3
    assert_one_line_error(lines, "generate", "no space left on device")


def test_generate_cli_subprocess_exit_code(photos, tmp_path):
    """The same contract through a real ``python -m robustlab.cli`` process."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "robustlab.cli",
            "generate",
            "imagenet-c",
            "--data",
            str(photos),
            "--out",
            str(tmp_path / "g"),
            "--shifts",
            ",",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[0].startswith("robustlab generate: error: ")
    assert "Traceback" not in proc.stderr


def test_results_output_to_a_folder(good_db, tmp_path, capsys):
    """An OSError that reaches the CLI without its own message still says what is wrong."""
    rc, lines, _ = run_cli(capsys, "results", "--db", good_db, "--output", tmp_path)
    assert rc == 2
    assert_one_line_error(lines, "results", str(tmp_path), "is a folder")


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["report", "--db", "{db}", "--out", "{tmp}/r.html", "--resamples", "0"], "--resamples"),
        (
            [
                "train",
                "lite0",
                "--data",
                "{photos}",
                "--db",
                "{tmp}/t.duckdb",
                "--suite",
                "imagenet-c",
                "--test-fraction",
                "2",
                "--out",
                "{tmp}/ckpt",
            ],
            "test fraction",
        ),
        (
            [
                "evaluate",
                "lite0",
                "--data",
                "{photos}",
                "--db",
                "{tmp}/e.duckdb",
                "--suite",
                "imagenet-c",
                "--shift",
                "nosuch",
            ],
            "unknown shift",
        ),
    ],
)
def test_bad_values_are_user_errors_not_bugs(photos, good_db, tmp_path, capsys, argv, needle):
    """Found by a sweep of bad values: these printed "internal error" with a traceback."""
    argv = [a.format(db=good_db, tmp=tmp_path, photos=photos) for a in argv]
    rc, lines, _ = run_cli(capsys, *argv)
    assert rc == 2
    assert_one_line_error(lines, argv[0], needle)


def test_an_unknown_flag_shows_the_subcommands_usage_and_one_error_line(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["evaluate", "lite0", "--data", "x", "--bogus", "1"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: robustlab evaluate ")
    assert "--shift SHIFTS" in err and "COMMAND" not in err
    assert err.strip().splitlines()[-1] == (
        "robustlab evaluate: error: unrecognized arguments: --bogus 1"
    )


@pytest.mark.parametrize(
    "what, meant", [("shift", "gaussian_noise"), ("suite", "imagenet-c"), ("model spec", "lite0")]
)
def test_a_misspelt_name_gets_the_closest_matches(what, meant):
    from robustlab.models import load_model
    from robustlab.shifts import get_shift
    from robustlab.suites import get_suite

    typo = {"shift": "gausian_noise", "suite": "imagenet_c", "model spec": "lite00"}[what]
    find = {"shift": get_shift, "suite": get_suite, "model spec": load_model}[what]
    with pytest.raises(InputError) as exc:
        find(typo)
    msg = str(exc.value)
    assert msg.startswith(f"unknown {what} {typo!r}; did you mean {meant}")
    # the closest few, not the whole vocabulary (44 shifts)
    assert msg.count(",") <= 2 and "motion_blur" not in msg


def test_a_name_close_to_nothing_points_to_the_listing_command():
    from robustlab.shifts import get_shift

    with pytest.raises(InputError) as exc:
        get_shift("xyzzy")
    assert str(exc.value) == "unknown shift 'xyzzy'"
    assert exc.value.hint.startswith("robustlab list shifts shows all ")


def test_a_misspelt_shift_on_the_command_line_is_one_line(photos, tmp_path, capsys):
    rc, lines, _ = run_cli(
        capsys,
        "evaluate", "lite0", "--data", photos, "--db", tmp_path / "r.duckdb",
        "--suite", "imagenet-c", "--shift", "gaussian_nosie",
    )  # fmt: skip
    assert rc == 2
    assert_one_line_error(lines, "evaluate", "did you mean gaussian_noise")


def test_top1_is_a_fraction_in_the_api_and_csv_and_a_labelled_percent_in_tables(good_db, capsys):
    """One quantity, two spellings that say which they are: ``top1`` (a fraction) in the
    Python API and csv/json, ``top1 %`` in the printed tables; and no lock file is left
    next to the database after the commands that used it."""
    from robustlab.store import Store

    stored = Store(good_db).predictions()
    frac = float(stored["correct"].mean())
    rc, _, out = run_cli(capsys, "results", "--db", good_db, "--format", "csv")
    assert rc == 0
    row = next(r for r in out.splitlines()[1:] if ",clean," in r)
    head = out.splitlines()[0].split(",")
    assert float(row.split(",")[head.index("top1")]) == pytest.approx(frac)
    rc, _, out = run_cli(capsys, "results", "--db", good_db)
    assert rc == 0 and "top1 %" in out.splitlines()[0]
    assert f"{100 * frac:.2f}" in out
    assert not good_db.with_name(good_db.name + ".lock").exists()


@pytest.mark.parametrize(
    "argv, prog, tail",
    [
        (["evalute", "lite0"], "robustlab", "; did you mean evaluate?"),
        (["list", "shfts"], "robustlab list", "; did you mean shifts?"),
        (["data", "ikons"], "robustlab data", "; did you mean icons?"),
        (["results", "--format", "markdwn"], "robustlab results", "; did you mean markdown?"),
        (
            ["evaluate", "lite0", "--data", "x", "--shfit", "fog"],
            "robustlab evaluate",
            "unrecognized arguments: --shfit fog; did you mean --shift?",
        ),
        (
            ["generate", "imagenet-c", "--data", "x", "--out", "y", "--unlabeled"],
            "robustlab generate",
            "unrecognized arguments: --unlabeled; did you mean --unlabelled?",
        ),
    ],
)
def test_a_misspelt_command_choice_or_flag_gets_the_closest_match(capsys, argv, prog, tail):
    """argparse's own errors (a subcommand, a choice, a flag) name the closest match too,
    with the usage of the command they belong to."""
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith(f"usage: {prog} ")
    assert err[-1].startswith(f"{prog}: error: ") and err[-1].endswith(tail), err[-1]
