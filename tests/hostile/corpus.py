"""A broad hostile corpus run against the real CLI: ``python tests/hostile/corpus.py``.

Why a script beside the tests: each case is a whole ``robustlab`` process (a few seconds
each, minutes in all), so the corpus is run by hand after a reliability change, not in the
default suite; ``tests/hostile/test_*.py`` hold the regression test of every finding.

Every case runs in a world built from the repository's real photos (a flat folder with its
labels, class folders with masks, a published ImageNet-E archive, a generated folder, a
results database with a real lite0 run scored with an outside labels CSV and its own
weights file) plus an ``outside/`` folder whose files must never be read: ``secret.txt``
(shaped like every labels file robustlab reads, with a canary line) and a photo. A case
copies what it needs, sets its trap, runs the command, and is checked for:

- exit 70 or a traceback (a user-caused condition must be one line, exit 2 or 3);
- the canary in stdout, stderr or any file or database the command wrote (an outside file
  read);
- any pre-existing file changed or removed that the case does not name as an output (data
  loss, an input overwritten), the outside folder included;
- the exit status the case expects, where it expects one.

Prints one line per case and a summary; exits 1 when any case fails a check.
``--keep DIR`` builds the world in DIR and leaves it; ``-k WORD`` runs the cases whose name
holds WORD.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _runs_helpers as h  # noqa: E402

CANARY = "CANARY-5c1e9a"
BIG = str(2**70)


@dataclass
class Case:
    """One hostile command.

    Attributes:
        name: What it tries.
        argv: The command, with ``{name}`` placeholders for the world's paths (``{w}`` is
            the world, ``{c}`` the case's own folder).
        setup: Builds the case's trap in its folder (gets the world and the case folder).
        outputs: Paths (placeholders allowed) the command may create or change.
        expect: Exit statuses accepted (None: any but 70).
    """

    name: str
    argv: list[str]
    setup: Callable[[Path, Path], None] | None = None
    outputs: tuple[str, ...] = ()
    expect: tuple[int, ...] | None = None
    notes: list[str] = field(default_factory=list)


# ------------------------------------------------------------------ the world
def build_world(world: Path) -> None:
    """The shared inputs every case may read (see the module docstring)."""
    from PIL import Image

    rows = h.photo_rows(6)
    h.flat_folder(world / "flat", 3)
    h.write_labels(world / "labels.csv", rows[:3])
    tree, masks = world / "tree", world / "masks"
    for r in rows[:3]:
        (tree / r["wnid"]).mkdir(parents=True)
        (masks / r["wnid"]).mkdir(parents=True)
        shutil.copyfile(h.MINI / r["file"], tree / r["wnid"] / r["file"])
        with Image.open(h.MINI / r["file"]) as img:
            w, ht = img.size
        m = Image.new("L", (w, ht), 0)
        m.paste(255, (w // 4, ht // 4, 3 * w // 4, 3 * ht // 4))
        m.save(masks / r["wnid"] / (r["file"].rsplit(".", 1)[0] + ".png"))
    outside = world / "outside"
    outside.mkdir()
    lines = [f"{r['file']}\t{r['index']}" for r in rows[:3]]
    secret = "file,index,class,style\n" + "".join(f"{r['file']},{r['index']},x,y\n" for r in rows)
    (outside / "secret.txt").write_text(secret + "\n".join(lines) + f"\n{CANARY}.png\t3\n")
    shutil.copyfile(h.MINI / rows[5]["file"], outside / "photo.JPEG")
    arch = world / "archive"
    (arch / "ori").mkdir(parents=True)
    (arch / "size_0.05").mkdir()
    names = []
    for r in rows[:2]:
        stem = r["file"].rsplit(".", 1)[0]
        with Image.open(h.MINI / r["file"]) as img:
            rgb = img.convert("RGB").resize((96, 96))
        rgb.save(arch / "ori" / f"{stem}.png")
        rgb.resize((32, 32)).resize((96, 96)).save(arch / "size_0.05" / f"{stem}.png")
        names.append(f"{stem}.png\t{r['index']}")
    (arch / "labels.txt").write_text("\n".join(names) + "\n")
    from robustlab.models.lite import package_weights

    shutil.copyfile(package_weights("lite0"), world / "lite0.pth")
    _run(
        [
            "evaluate",
            "lite0",
            "--data",
            world / "flat",
            "--labels",
            world / "labels.csv",
            "--weights",
            world / "lite0.pth",
            "--db",
            world / "runs.duckdb",
            "--workers",
            "0",
        ],
        check=True,
    )
    _run(
        [
            "generate",
            "imagenet-c",
            "--data",
            world / "tree",
            "--out",
            world / "gen",
            "--shift",
            "contrast",
            "--level",
            "1",
            "--workers",
            "0",
        ],
        check=True,
    )


def _run(argv, check: bool = False, cwd=None) -> subprocess.CompletedProcess:
    res = subprocess.run(
        h.robustlab_cmd(*[str(a) for a in argv], *(["--no-progress"] if _quiet(argv) else [])),
        capture_output=True,
        text=True,
        env=h.subprocess_env(),
        timeout=900,
        cwd=cwd,
    )
    if check and res.returncode != 0:
        raise SystemExit(f"building the world failed: {argv}\n{res.stderr}")
    return res


def _quiet(argv) -> bool:
    return bool(argv) and str(argv[0]) in {"evaluate", "generate", "masks", "saliency", "mine"}


# ------------------------------------------------------------------ traps
def copy(src: str, dst: str = "") -> Callable[[Path, Path], None]:
    """Copy the world's ``src`` into the case folder (as ``dst``)."""

    def make(world: Path, case: Path) -> None:
        target = case / (dst or src)
        if (world / src).is_dir():
            shutil.copytree(world / src, target, symlinks=True)
        else:
            shutil.copyfile(world / src, target)

    return make


def link(rel: str, target: str) -> Callable[[Path, Path], None]:
    """Replace ``case/rel`` by a symbolic link to ``target`` (world-relative, absolute)."""

    def make(world: Path, case: Path) -> None:
        path = case / rel
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()
        path.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(world / target, path)

    return make


def write(rel: str, data: bytes | str) -> Callable[[Path, Path], None]:
    def make(world: Path, case: Path) -> None:
        path = case / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data.encode() if isinstance(data, str) else data)

    return make


def both(*steps: Callable[[Path, Path], None]) -> Callable[[Path, Path], None]:
    def make(world: Path, case: Path) -> None:
        for step in steps:
            step(world, case)

    return make


def dataset(rel: str) -> Callable[[Path, Path], None]:
    """A user's non-empty folder at ``case/rel`` (a photo and a README)."""
    return both(copy("tree", rel), write(f"{rel}/README.txt", "mine\n"))


def bomb_png(side: int = 20000) -> bytes:
    import io
    import struct
    import zlib

    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (1, 1)).save(buf, "PNG")
    data = bytearray(buf.getvalue())
    i = data.index(b"IHDR")
    data[i + 4 : i + 12] = struct.pack(">II", side, side)
    data[i + 17 : i + 21] = struct.pack(">I", zlib.crc32(bytes(data[i : i + 17])) & 0xFFFFFFFF)
    return bytes(data)


EV = ["evaluate", "lite0", "--workers", "0", "--db", "{c}/r.duckdb"]
EV_OUT = ("{c}/r.duckdb", "{c}/r.duckdb.wal", "{c}/.r.duckdb.lock")


def cases() -> list[Case]:
    out: list[Case] = []
    # ---- links out of every layout (read nothing outside, name the link)
    out += [
        Case(
            "flat labels.csv -> outside",
            [*EV, "--data", "{c}/flat"],
            both(copy("flat"), link("flat/labels.csv", "outside/secret.txt")),
            EV_OUT,
            (2,),
        ),
        Case(
            "archive labels.txt -> outside",
            [*EV, "--data", "{c}/archive"],
            both(copy("archive"), link("archive/labels.txt", "outside/secret.txt")),
            EV_OUT,
            (2,),
        ),
        Case(
            "archive ori/ -> outside folder",
            [*EV, "--data", "{c}/archive"],
            both(copy("archive"), link("archive/ori", "outside")),
            EV_OUT,
            (2,),
        ),
        Case(
            "archive level file -> outside photo",
            [*EV, "--data", "{c}/archive"],
            both(copy("archive"), link("archive/size_0.05/extra.png", "outside/photo.JPEG")),
            EV_OUT,
            (0,),
        ),
        Case(
            "archive labels.txt not UTF-8",
            [*EV, "--data", "{c}/archive"],
            both(copy("archive"), write("archive/labels.txt", b"\xff\xfe\x00bad\tx\n")),
            EV_OUT,
            (2,),
        ),
        Case(
            "archive labels.txt empty",
            [*EV, "--data", "{c}/archive"],
            both(copy("archive"), write("archive/labels.txt", "")),
            EV_OUT,
            (2,),
        ),
        Case(
            "generated manifest.json -> outside",
            [*EV, "--data", "{c}/gen"],
            both(copy("gen"), link("gen/manifest.json", "outside/secret.txt")),
            EV_OUT,
            (2,),
        ),
        Case(
            "generated cell -> outside photo",
            [*EV, "--data", "{c}/gen"],
            both(copy("gen"), link(_first_cell(), "outside/photo.JPEG")),
            EV_OUT,
            (0,),
        ),
        Case(
            "generated cell is a decompression bomb",
            [*EV, "--data", "{c}/gen"],
            both(copy("gen"), write(_first_cell(), bomb_png())),
            EV_OUT,
            (0,),
        ),
        Case(
            "mask -> outside",
            [
                *EV,
                "--data",
                "{w}/tree",
                "--masks",
                "{c}/masks",
                "--suite",
                "ximagenet12",
                "--shift",
                "segmented",
            ],
            both(copy("masks"), link(_first_mask(), "outside/photo.JPEG")),
            EV_OUT,
            (0,),
        ),
        Case(
            "masks folder is a file",
            [*EV, "--data", "{w}/tree", "--masks", "{w}/labels.csv", "--suite", "ximagenet12"],
            None,
            EV_OUT,
            (2,),
        ),
        Case(
            "holdout metadata.csv -> outside",
            [
                "holdout",
                "--data",
                "{c}/tree",
                "--holdout",
                "style=x",
                "--db",
                "{c}/h.duckdb",
                "--out",
                "{c}/ck",
            ],
            both(copy("tree"), link("tree/metadata.csv", "outside/secret.txt")),
            ("{c}/h.duckdb", "{c}/ck"),
            (2,),
        ),
        Case(
            "data folder is a link out of its parent (the user named it)",
            [*EV, "--data", "{c}/flat"],
            link("flat", "flat"),
            EV_OUT,
            (0,),
        ),
    ]
    # ---- outputs over stored inputs, --force included
    db = "{w}/runs.duckdb"
    out += [
        Case(
            "results --output a run's labels CSV",
            ["results", "--db", db, "--format", "csv", "--output", "{w}/labels.csv"],
            None,
            (),
            (2,),
        ),
        Case(
            "report --force over a run's labels CSV",
            ["report", "--db", db, "--out", "{w}/labels.csv", "--force"],
            None,
            (),
            (2,),
        ),
        Case(
            "report --force over a run's weights",
            ["report", "--db", db, "--out", "{w}/lite0.pth", "--force"],
            None,
            (),
            (2,),
        ),
        Case(
            "report --out inside a run's data folder",
            ["report", "--db", db, "--out", "{w}/flat/report.html"],
            None,
            (),
            (2,),
        ),
        Case(
            "results --export into a run's data folder",
            ["results", "--db", db, "--export", "{w}/flat"],
            None,
            (),
            (2,),
        ),
        Case(
            "review --export over a run's labels CSV",
            ["review", "--data", "{w}/flat", "--db", db, "--export", "{w}/labels.csv", "-k", "1"],
            None,
            (),
            (2,),
        ),
        Case(
            "train --out is a run's data folder",
            [
                "train",
                "lite0",
                "--data",
                "{w}/tree",
                "--masks",
                "{w}/masks",
                "--db",
                db,
                "--out",
                "{w}/flat",
            ],
            None,
            (),
            (2,),
        ),
        Case(
            "report --out through a link to a run's labels CSV",
            ["report", "--db", db, "--out", "{c}/r.html", "--force"],
            link("r.html", "labels.csv"),
            (),
            (2,),
        ),
        Case(
            "report --out is the database",
            ["report", "--db", db, "--out", db, "--force"],
            None,
            (),
            (2,),
        ),
        Case(
            "evaluate --db is the data folder's photo",
            [*EV[:-2], "--data", "{w}/flat", "--db", "{w}/flat/" + h.photo_rows(1)[0]["file"]],
            None,
            (),
            (2, 3),
        ),
    ]
    # ---- folders written into by surprise
    gen = ["generate", "imagenet-c", "--data", "{w}/tree", "--shift", "contrast", "--level", "1"]
    out += [
        Case("demo --out a dataset", ["demo", "--out", "{c}/ds"], dataset("ds"), (), (2,)),
        Case(
            "generate --out a dataset",
            [*gen, "--out", "{c}/ds", "--workers", "0"],
            dataset("ds"),
            (),
            (2,),
        ),
        Case(
            "generate --out a dataset --into-existing",
            [*gen, "--out", "{c}/ds", "--workers", "0", "--into-existing"],
            dataset("ds"),
            ("{c}/ds",),
            (0,),
        ),
        Case(
            "masks --out a dataset",
            ["masks", "--data", "{w}/tree", "--out", "{c}/ds"],
            dataset("ds"),
            (),
            (2,),
        ),
        Case(
            "mine --out a dataset",
            [
                "mine",
                "--data",
                "{w}/tree",
                "--out",
                "{c}/ds",
                "--db",
                "{c}/m.duckdb",
                "--surrogates",
                "lite0",
            ],
            dataset("ds"),
            ("{c}/m.duckdb",),
            (2,),
        ),
        Case(
            "data icons --out a dataset",
            ["data", "icons", "--out", "{c}/ds"],
            dataset("ds"),
            (),
            (2,),
        ),
        Case(
            "synth --out a dataset",
            ["synth", "--checkpoint", "{c}/none", "--out", "{c}/ds"],
            dataset("ds"),
            (),
            (2,),
        ),
        Case("generate --out is a file", [*gen, "--out", "{w}/labels.csv"], None, (), (2,)),
        Case("generate --out inside --data", [*gen, "--out", "{w}/tree/gen"], None, (), (2,)),
    ]
    # ---- one seed rule, counts
    for argv in (
        ["evaluate", "lite0", "--data", "{w}/flat", "--seed"],
        ["generate", "imagenet-c", "--data", "{w}/tree", "--out", "{c}/g", "--seed"],
        ["holdout", "--data", "{w}/tree", "--seed"],
        ["train", "lite0", "--data", "{w}/tree", "--split-seed"],
        ["report", "--db", db, "--bootstrap-seed"],
    ):
        for value in ("-1", BIG, "1e3"):
            out.append(Case(f"{argv[0]} {argv[-1]} {value}", [*argv, value], None, (), (2,)))
    for argv in (
        ["saliency", "lite0", "--data", "{w}/tree", "--masks", "{w}/masks", "--limit"],
        ["segment", "torchvision:x", "--data", "{w}/tree", "--masks", "{w}/masks", "--limit"],
        ["generate", "imagenet-c", "--data", "{w}/tree", "--out", "{c}/g", "--limit"],
        ["synth", "--checkpoint", "{c}/x", "--out", "{c}/g", "--per-pair"],
        ["synth", "--checkpoint", "{c}/x", "--out", "{c}/g", "--steps"],
        ["holdout", "--data", "{w}/tree", "--holdout", "a=b", "--epochs"],
        ["train", "lite0", "--data", "{w}/tree", "--steps"],
        ["mine", "--data", "{w}/tree", "--db", "{c}/m.duckdb", "-k"],
        ["masks", "--data", "{w}/tree", "--out", "{c}/m", "--iterations"],
        ["results", "--db", db, "--resamples"],
        ["evaluate", "lite0", "--data", "{w}/flat", "--batch-size"],
    ):
        for value in ("0", "-3"):
            out.append(Case(f"{argv[0]} {argv[-1]} {value}", [*argv, value], None, (), (2,)))
    for value in ("-1", "100000000", "2.5"):
        argv = ["evaluate", "lite0", "--data", "{w}/flat", "--workers", value]
        out.append(Case(f"evaluate --workers {value}", argv, None, (), (2,)))
    # ---- databases and files of the wrong kind
    out += [
        Case(
            "results on another program's runs table",
            ["results", "--db", "{c}/o.duckdb"],
            _foreign_db,
            (),
            (3,),
        ),
        Case(
            "results on a zero-byte database",
            ["results", "--db", "{c}/z.duckdb"],
            write("z.duckdb", b""),
            (),
            None,
        ),
        Case(
            "results on a text file as database",
            ["results", "--db", "{w}/labels.csv"],
            None,
            (),
            (3,),
        ),
        Case("results --db is a folder", ["results", "--db", "{w}/flat"], None, (), (2, 3)),
        Case("evaluate --data is a file", [*EV, "--data", "{w}/labels.csv"], None, EV_OUT, (2,)),
        Case(
            "labels CSV is binary",
            [*EV, "--data", "{w}/flat", "--labels", "{c}/b.csv"],
            write("b.csv", bytes(range(256)) * 4),
            EV_OUT,
            (2,),
        ),
        Case(
            "labels CSV names ../ and absolute paths",
            [*EV, "--data", "{w}/flat", "--labels", "{c}/l.csv"],
            write(
                "l.csv",
                f"file,index\n../outside/photo.JPEG,1\n{'/etc/passwd'},2\n"
                f"{h.photo_rows(1)[0]['file']},0\n",
            ),
            EV_OUT,
            (0,),
        ),
        Case(
            "published ImageNet-C layout, a cell folder -> outside",
            [*EV, "--data", "{c}/pub"],
            _published_with_link_out,
            EV_OUT,
            (0,),
        ),
        Case(
            "labels CSV lists a file twice",
            [*EV, "--data", "{w}/flat", "--labels", "{c}/l.csv"],
            write("l.csv", f"file,index\n{_photo()},0\n{_photo()},0\n"),
            EV_OUT,
            (2,),
        ),
        Case(
            "--weights is a text file",
            [*EV, "--data", "{w}/flat", "--weights", "{c}/w.pth"],
            write("w.pth", "not a state dict\n"),
            EV_OUT,
            (2,),
        ),
        Case(
            "a mask of another size",
            [*EV, "--data", "{w}/tree", "--masks", "{c}/masks", "--suite", "ximagenet12"]
            + ["--shift", "segmented"],
            both(copy("masks"), _small_mask),
            EV_OUT,
            (0,),
        ),
        Case(
            "mine --out is its --db",
            ["mine", "--data", "{w}/tree", "--out", "{c}/m.duckdb", "--db", "{c}/m.duckdb"]
            + ["--surrogates", "lite0"],
            None,
            (),
            (2,),
        ),
        Case(
            "photo is a decompression bomb",
            [*EV, "--data", "{c}/flat"],
            both(copy("flat"), write("flat/" + h.photo_rows(1)[0]["file"], bomb_png())),
            EV_OUT,
            (0,),
        ),
    ]
    return out


def _first_cell() -> str:
    r = h.photo_rows(1)[0]
    return f"gen/contrast/1/{r['wnid']}/{r['file']}"


def _first_mask() -> str:
    r = h.photo_rows(1)[0]
    return f"masks/{r['wnid']}/{r['file'].rsplit('.', 1)[0]}.png"


def _photo() -> str:
    return h.photo_rows(1)[0]["file"]


def _published_with_link_out(world: Path, case: Path) -> None:
    """ImageNet-C as downloaded (``<corruption>/<severity>/<wnid>/<file>``), one severity
    folder a link to a folder of outside photos laid out the same way."""
    pub = case / "pub"
    shutil.copytree(world / "tree", pub / "contrast" / "1")
    away = case / "away"
    shutil.copytree(world / "tree", away)
    for f in away.rglob("*.JPEG"):
        shutil.copyfile(world / "outside" / "photo.JPEG", f)
    os.symlink(away, pub / "contrast" / "2")


def _small_mask(world: Path, case: Path) -> None:
    from PIL import Image

    Image.new("L", (17, 9), 255).save(case / _first_mask())


def _foreign_db(world: Path, case: Path) -> None:
    import duckdb

    con = duckdb.connect(str(case / "o.duckdb"))
    con.execute("CREATE TABLE runs (a INTEGER)")
    con.close()


# ------------------------------------------------------------------ checks
def snapshot(root: Path) -> dict[str, str]:
    """Digest of every file under ``root`` (links as their target text)."""
    out = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if p.is_symlink():
            out[rel] = "link:" + os.readlink(p)
        elif p.is_file():
            out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def canary_in(path: Path) -> bool:
    if path.suffix == ".duckdb":
        try:
            import duckdb

            con = duckdb.connect(str(path), read_only=True)
            tables = [r[0] for r in con.execute("SHOW TABLES").fetchall()]
            text = " ".join(str(con.execute(f'SELECT * FROM "{t}"').fetchall()) for t in tables)
            con.close()
            return CANARY in text
        except Exception:  # noqa: BLE001 - not a database the command wrote
            return False
    try:
        return CANARY.encode() in path.read_bytes()
    except OSError:
        return False


def run_case(world: Path, case: Case, n: int) -> list[str]:
    folder = world / "cases" / f"{n:03d}"
    folder.mkdir(parents=True)
    if case.setup is not None:
        case.setup(world, folder)
    sub = {"w": str(world), "c": str(folder)}
    argv = [a.format(**sub) for a in case.argv]
    allowed = [Path(o.format(**sub)) for o in case.outputs]
    before = snapshot(world)
    res = _run(argv, cwd=folder)
    after = snapshot(world)
    problems = []
    if res.returncode == 70 or "Traceback" in res.stderr or "internal error" in res.stderr:
        problems.append(f"exit {res.returncode} with a traceback")
    if case.expect is not None and res.returncode not in case.expect:
        problems.append(f"exit {res.returncode}, expected {case.expect}")
    if CANARY in res.stdout + res.stderr:
        problems.append("the outside file's canary in the output")

    def allowed_path(rel: str) -> bool:
        p = world / rel
        return any(p == a or a in p.parents for a in allowed)

    for rel, digest in before.items():
        if after.get(rel) != digest and not allowed_path(rel):
            problems.append(f"{rel} {'changed' if rel in after else 'removed'}")
    for rel in sorted(after.keys() - before.keys()):
        if canary_in(world / rel):
            problems.append(f"the canary in {rel}")
        if not allowed_path(rel):
            problems.append(f"{rel} created, not an output of the case")
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ": error:" in ln]
    case.notes.append(f"exit {res.returncode}: " + ((errors or lines or [""])[-1][:150]))
    return problems


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--keep", type=Path, help="build the world here and keep it")
    p.add_argument("-k", dest="word", default="", help="only cases whose name holds WORD")
    args = p.parse_args(argv)
    world = args.keep or Path(tempfile.mkdtemp(prefix="robustlab-corpus-"))
    world.mkdir(parents=True, exist_ok=True)
    cache = Path(tempfile.mkdtemp(prefix="robustlab-corpus-cache-"))
    os.environ.setdefault("ROBUSTLAB_CACHE_DIR", str(cache))
    t0 = time.perf_counter()
    failed = 0
    try:
        if not (world / "runs.duckdb").exists():
            build_world(world)
        shutil.rmtree(world / "cases", ignore_errors=True)  # a kept world's earlier cases
        chosen = [c for c in cases() if args.word in c.name]
        for n, case in enumerate(chosen):
            t = time.perf_counter()
            problems = run_case(world, case, n)
            failed += bool(problems)
            mark = "FAIL" if problems else "ok  "
            print(f"{mark} {time.perf_counter() - t:5.1f}s  {case.name}: {case.notes[-1]}")
            for pr in problems:
                print(f"       - {pr}")
        took = time.perf_counter() - t0
        print(f"{len(chosen) - failed}/{len(chosen)} cases passed in {took:.0f} s")
    finally:
        shutil.rmtree(cache, ignore_errors=True)
        if not args.keep:
            shutil.rmtree(world, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
