"""The embedded demo set and ``robustlab demo``: the whole pipeline with nothing to download.

The demo photos are real photographs that already ship inside installed dependencies
(scikit-image's ``skimage/data`` folder and matplotlib's sample data), so a fresh install
can run an end-to-end benchmark offline. ``assets/demo/photos.csv`` lists each photo:
where it comes from, its licence, its class and the box that seeded its mask; the class
table (``assets/demo/classes.csv``) is the ``demo`` label space, in which each class maps
to a few ImageNet-1k ids (a prediction is correct when it hits any of them; see
``docs/demo.md`` for why each mapping is what it is). The foreground masks were made once
with the project's own GrabCut masker (``docs/make_demo_masks.py``), inspected by eye and
checked in under ``assets/demo/masks``.

:func:`run_demo` copies the photos into an ImageFolder tree, evaluates the bundled
``lite0`` on the clean photos, the ImageNet-C corruptions at every severity and the
foreground/background scenarios and the ImageNet-E attribute edits (object size, position,
direction) that need no generative model, stores everything in one
DuckDB file and writes the HTML report from that file.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import shutil
import sys
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from robustlab.errors import InputError, MissingResourceError
from robustlab.files.atomic import atomic_path, atomic_write
from robustlab.files.safety import check_out_folder, claim_out_folder

DEMO_LABEL_SPACE = "demo"
DEMO_MODEL = "lite0"
# Suites the demo runs, in order. Shifts that need a configured external tool (ai_bg's
# inpainting model) are left out: the demo must run offline on a fresh install.
DEMO_SUITES = ("imagenet-c", "ximagenet12", "imagenet9", "imagenet-e")
DB_NAME = "robustlab.duckdb"
REPORT_NAME = "report.html"
# What the last complete demo run in a folder saw (see _demo_inputs and _db_state): a rerun
# that finds the same inputs, code and database has nothing to compute and says so.
STATE_NAME = ".demo-state.json"


@dataclass(frozen=True)
class DemoPhoto:
    """One demo photo (a row of ``assets/demo/photos.csv``).

    Attributes:
        id: Sample id in the materialised ImageFolder tree (``<class>/<file>``).
        package: Distribution that ships the photo (``scikit-image``, ``matplotlib``).
        resource: Path of the file inside the package's import folder.
        class_name: Folder name of its class in the ``demo`` label space.
        bbox: ``(x0, y0, x1, y1)`` source pixels: the hand-chosen box that seeded GrabCut.
        cam_class: ImageNet id whose lite0 CAM seeded GrabCut inside the box (None: the
            box alone seeded it).
        fill_holes: Whether holes enclosed by the GrabCut mask were filled afterwards.
        photo: What the photo shows and which loader function exposes it.
        licence: Licence as stated by the shipping package.
    """

    id: str
    package: str
    resource: str
    class_name: str
    bbox: tuple[int, int, int, int]
    cam_class: int | None
    fill_holes: bool
    photo: str
    licence: str

    @property
    def source(self) -> Path:
        """The photo file inside the installed package (never downloaded)."""
        module = _PACKAGE_MODULES.get(self.package)
        if module is None:
            raise ValueError(f"demo photo {self.id}: unknown package {self.package!r}")
        try:
            path = Path(str(resources.files(module).joinpath(self.resource)))
        except ModuleNotFoundError:
            raise MissingResourceError(
                f"demo photo {self.id} ships with {self.package}, which is not installed"
            ) from None
        if not path.is_file():
            raise MissingResourceError(
                f"demo photo {self.id}: {path} is missing from the installed {self.package}"
            )
        return path

    @property
    def mask(self) -> Path:
        """The checked-in foreground mask (source-sized 0/255 PNG)."""
        rel = Path(self.id).with_suffix(".png")
        return Path(str(_assets().joinpath("masks", *rel.parts)))


# Import name of each distribution that ships demo photos.
_PACKAGE_MODULES = {"scikit-image": "skimage", "matplotlib": "matplotlib"}


def _assets():
    return resources.files("robustlab.data").joinpath("assets", "demo")


def demo_photos() -> list[DemoPhoto]:
    """The demo photos in ``photos.csv`` order."""
    rows = list(
        csv.DictReader(_assets().joinpath("photos.csv").read_text(encoding="utf-8").splitlines())
    )
    out = []
    for r in rows:
        x0, y0, x1, y1 = (int(v) for v in r["bbox"].split())
        out.append(
            DemoPhoto(
                r["id"],
                r["package"],
                r["resource"],
                r["class"],
                (x0, y0, x1, y1),
                int(r["cam_class"]) if r["cam_class"] else None,
                r["fill_holes"] == "1",
                r["photo"],
                r["licence"],
            )
        )
    return out


def select_photos(photos=None) -> list[DemoPhoto]:
    """The demo photos to use: all, the first ``photos`` of them, or those with these ids."""
    every = demo_photos()
    if photos is None:
        return every
    if isinstance(photos, int) and not isinstance(photos, bool):
        if not 1 <= photos <= len(every):
            raise InputError(f"photos must be between 1 and {len(every)}, got {photos}")
        return every[:photos]
    wanted = list(photos)
    by_id = {p.id: p for p in every}
    unknown = [w for w in wanted if w not in by_id]
    if unknown:
        raise InputError(f"{unknown[0]!r} is not a demo photo; they are {', '.join(by_id)}")
    return [p for p in every if p.id in set(wanted)]


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _copy_if_changed(src: Path, dst: Path) -> None:
    """Copy ``src`` to ``dst`` unless ``dst`` already holds the same bytes (keeps resume exact)."""
    if dst.is_file() and dst.stat().st_size == src.stat().st_size and _digest(dst) == _digest(src):
        return
    with atomic_path(dst) as tmp:
        shutil.copyfile(src, tmp)


def materialise(out, photos=None) -> tuple[Path, Path]:
    """Write the demo photos as an ImageFolder tree ``<out>/data`` and masks ``<out>/masks``.

    The files are byte copies of the ones shipped by scikit-image and matplotlib (no
    re-encoding, so the data fingerprint, and with it the run id, is the same on every
    machine with the same package versions). Demo photos that are not selected are removed
    from the tree, so the folder always holds exactly the photos being evaluated.

    Returns:
        (data folder, masks folder).
    """
    out = Path(out)
    chosen = select_photos(photos)
    data, masks = out / "data", out / "masks"
    keep = {p.id for p in chosen}
    for p in demo_photos():
        if p.id not in keep:
            for stale in (data / p.id, masks / Path(p.id).with_suffix(".png")):
                if stale.is_file():
                    stale.unlink()
    for p in chosen:
        _copy_if_changed(p.source, data / p.id)
        _copy_if_changed(p.mask, masks / Path(p.id).with_suffix(".png"))
    return data, masks


def _offline_shifts(suite_name: str, classes_with_pairs: bool) -> tuple[list[str], list[str]]:
    """Shifts of a suite the demo can run offline, and the ones left out with the reason."""
    from robustlab.shifts.registry import get_shift, needs_resource
    from robustlab.suites import get_suite

    kept, dropped = [], []
    for name in get_suite(suite_name).shifts:
        shift = get_shift(name)
        if needs_resource(shift):
            dropped.append(f"{name} (needs a generative model that is not bundled)")
        elif shift.extra.get("donor_rule") == "same" and not classes_with_pairs:
            dropped.append(f"{name} (needs two photos of one class; each demo class has one)")
        else:
            kept.append(name)
    return kept, dropped


def plan_demo(
    photos=None, corruptions=None, levels=None, scenarios=None
) -> list[tuple[str, list, list | None, list[str]]]:
    """(suite, shifts, levels, left-out notes) for each suite the demo evaluates.

    Args:
        photos: See :func:`select_photos`.
        corruptions: ImageNet-C corruptions to run (default: every one the suite has);
            an empty list skips the suite.
        levels: Corruption severities (default 1-5).
        scenarios: Scene scenarios and attribute edits to run across the ximagenet12,
            imagenet9 and imagenet-e suites
            (default: every one that runs offline); an empty list skips both.
    """
    from collections import Counter

    from robustlab.suites import get_suite

    chosen = select_photos(photos)
    pairs = any(n > 1 for n in Counter(p.class_name for p in chosen).values())
    plan = []
    c_suite = get_suite("imagenet-c")
    if corruptions is None:
        corr = list(c_suite.shifts)
    else:
        corr = list(corruptions)
        bad = [c for c in corr if c not in c_suite.shifts]
        if bad:
            raise InputError(
                f"{bad[0]!r} is not an ImageNet-C corruption; use {', '.join(c_suite.shifts)}"
            )
    if corr:
        plan.append(("imagenet-c", corr, list(levels) if levels else None, []))
    known = set()
    for suite_name in DEMO_SUITES[1:]:
        kept, dropped = _offline_shifts(suite_name, pairs)
        known.update(kept)
        if scenarios is not None:
            kept = [s for s in kept if s in set(scenarios)]
        if kept:
            plan.append((suite_name, kept, None, dropped))
    if scenarios is not None:
        bad = [s for s in scenarios if s not in known]
        if bad:
            raise InputError(
                f"{bad[0]!r} is not a scenario the demo can run; use {', '.join(sorted(known))}"
            )
    return plan


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _demo_inputs(plan, chosen, report: bool) -> str:
    """Digest of everything a demo run's predictions and report depend on, read without
    importing torch: the plan, the photos' and masks' bytes, the package versions of the run
    identity, the bundled weights file, robustlab's own files (an edited checkout counts as
    new code) and the ``ROBUSTLAB_*`` / device settings of the environment.
    """
    import robustlab
    from robustlab.models.lite import package_weights
    from robustlab.records.identity import canonical_json, versions

    h = hashlib.blake2b(digest_size=16)
    parts: dict = {
        "plan": plan,
        "photos": [(p.id, _digest(p.source), _digest(p.mask)) for p in chosen],
        "versions": versions(),
        "report": report,
        "env": sorted(
            (k, v)
            for k, v in os.environ.items()
            if k.startswith("ROBUSTLAB_") or k in ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES")
        ),
    }
    try:
        w = package_weights(DEMO_MODEL)
        parts["weights"] = (str(w), w.stat().st_size, w.stat().st_mtime_ns)
    except MissingResourceError:
        parts["weights"] = None
    h.update(canonical_json(parts).encode())
    root = Path(robustlab.__file__).parent
    for f in sorted(root.rglob("*")):
        if f.is_file() and "__pycache__" not in f.parts:
            st = f.stat()
            h.update(f"{f.relative_to(root)}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def _db_state(db: Path) -> str | None:
    """Digest of the database's content as the report sees it: every run row (without its
    start and finish times, which a resume rewrites) and the row count of every table."""
    from robustlab.records.identity import canonical_json
    from robustlab.store.connection import table_names
    from robustlab.store import Store

    if not db.is_file():
        return None
    with Store(db).connect(read_only=True) as con:
        runs = con.execute(
            "SELECT * EXCLUDE (started_at, finished_at) FROM runs ORDER BY run_id"
        ).fetchall()
        tables = sorted(table_names(con))
        counts = [(t, con.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0]) for t in tables]
    blob = canonical_json({"runs": runs, "counts": counts})
    return hashlib.blake2b(blob.encode(), digest_size=16).hexdigest()


def _read_state(out: Path) -> dict:
    try:
        state = json.loads((out / STATE_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return state if isinstance(state, dict) else {}


def _write_state(out: Path, state: dict) -> None:
    atomic_write(out / STATE_NAME, json.dumps(state, indent=1).encode("utf-8"))


def run_demo(
    out="robustlab-demo",
    *,
    photos=None,
    corruptions=None,
    levels=None,
    scenarios=None,
    workers: int | None = None,
    progress: bool | None = None,
    report: bool = True,
) -> int:
    """Run the whole pipeline on the embedded demo photos with the bundled ``lite0``.

    Steps: copy the photos and masks into ``out``; evaluate clean accuracy, the ImageNet-C
    corruptions at every severity (computed on the fly) and the foreground/background
    scenarios of the ximagenet12 and imagenet9 suites and the imagenet-e attribute edits
    that need no generative model; store
    every prediction in ``<out>/robustlab.duckdb``; write ``<out>/report.html`` from that
    database. Rerunning resumes: stored predictions are not recomputed or duplicated.
    Nothing touches the network (the photos come from installed packages, the weights from
    the bundled lite0 package).

    Args:
        out: Output folder (created).
        photos, corruptions, levels, scenarios: A reduced configuration (see
            :func:`plan_demo`); the defaults run the full demo.
        workers: Worker processes for the shifts (default: ``evaluate``'s, one per core
            the model leaves free).
        progress: Progress bars (default: when stderr is a terminal); step lines are
            always printed.
        report: Write the HTML report.

    Returns:
        0 (the exit status of ``robustlab demo``).
    """
    from robustlab.envcheck import check_torchvision

    # First of all: a torch/torchvision pair that cannot load the model is one line before
    # anything is copied or created (the cause is the installation, not the demo).
    check_torchvision()
    out = Path(out).expanduser()
    if out.exists() and not out.is_dir():
        raise InputError(
            f"--out {out} is a file; give a folder for the demo's data, database and report"
        )
    # Never into a folder the demo did not create (a dataset would gain data/, masks/, a
    # database and a report.html, and fail to evaluate; an existing report or database
    # would be replaced or added to). Its own: the owner mark, or a finished demo's state.
    check_out_folder(
        out,
        command="demo",
        flag="--out",
        made=lambda folder: (folder / STATE_NAME).is_file(),
        allow_flag=None,
    )
    plan = plan_demo(photos, corruptions, levels, scenarios)
    chosen = select_photos(photos)
    claim_out_folder(out, command="demo")
    t0 = time.perf_counter()
    n_steps = len(plan) + 2 + int(report)
    step = 1
    _say(f"[{step}/{n_steps}] copying {len(chosen)} demo photos and their masks to {out}")
    data, masks = materialise(out, photos)
    db = out / DB_NAME
    state = _read_state(out)
    inputs = _demo_inputs(plan, chosen, report)
    if _nothing_to_do(state, inputs, db, out, report):
        # Same photos, plan, code, package versions, weights and settings as the last
        # complete run, and the database it left: every run id would be the same and every
        # prediction is stored, so loading the model and resuming four runs would compute
        # nothing (it used to take 30 s to find that out).
        run_ids = list(state["run_ids"])
        _say(
            f"resumed: nothing new to compute ({len(run_ids)} runs complete in {db}, "
            f"same photos, code and settings as the last demo run"
            + (f"; report unchanged: {out / REPORT_NAME}" if report else "")
            + ")"
        )
        return _finish(out, db, run_ids, report, t0)
    run_ids, n_written = _evaluate_plan(
        plan, len(chosen), data, masks, db, workers, progress, n_steps
    )
    db_now, report_db = _report_step(state, inputs, db, out, run_ids, len(chosen), report, n_steps)
    # (the state is written only after a complete run: an interrupted one is resumed in full)
    _write_state(out, {"inputs": inputs, "db": db_now, "run_ids": run_ids, "report_db": report_db})
    if n_written == 0:
        _say("resumed: nothing new to compute")
    return _finish(out, db, run_ids, report, t0)


def _nothing_to_do(state: dict, inputs: str, db: Path, out: Path, report: bool) -> bool:
    """Whether the last complete demo run in ``out`` had these inputs and left the database
    as it is now (and, with ``report``, its report built from that database): then resuming
    would compute nothing and the model need not be loaded. The database digest is read
    only when the inputs match (it opens the database)."""
    return (
        state.get("inputs") == inputs
        and state.get("db") is not None
        and state.get("db") == _db_state(db)
        and (
            not report or (state.get("report_db") == state["db"] and (out / REPORT_NAME).is_file())
        )
    )


def _evaluate_plan(
    plan, n_photos: int, data, masks, db: Path, workers, progress, n_steps: int
) -> tuple[list[str], int]:
    """Load the demo model and evaluate every suite of ``plan`` into ``db``, printing the
    step lines ``[2/n]`` onwards; return the run ids (in plan order) and the number of
    predictions written (0 when everything was resumed). Kept apart from :func:`run_demo`
    so that the caching and report decisions read in one screen."""
    from robustlab.models import load_model
    from robustlab.suites import get_suite
    from robustlab.workflows.evaluate import evaluate

    step = 2
    _say(f"[{step}/{n_steps}] loading {DEMO_MODEL} (bundled ImageNet weights)")
    model = load_model(DEMO_MODEL, label_space=DEMO_LABEL_SPACE)
    run_ids = []
    n_written = 0
    for suite_name, shifts, lv, dropped in plan:
        step += 1
        cells = get_suite(suite_name).select(shifts, lv)
        _say(
            f"[{step}/{n_steps}] {suite_name}: {_cells_text(suite_name, shifts, cells)} on {n_photos} photos"
        )
        for note in dropped:
            _say(f"    left out: {note}")
        t = time.perf_counter()
        res = evaluate(
            model,
            data,
            suite=suite_name,
            db=db,
            shifts=shifts,
            levels=lv,
            masks=masks,
            label_space=DEMO_LABEL_SPACE,
            workers=workers,
            progress=progress,
        )
        run_ids.append(res.run_id)
        n_written += res.n_written
        resumed = " (resumed)" if res.resumed else ""
        _say(f"    {res.n_written} predictions written{resumed} in {time.perf_counter() - t:.1f} s")
    return run_ids, n_written


def _report_step(
    state: dict, inputs: str, db: Path, out: Path, run_ids, n_photos: int, report: bool, n_steps
) -> tuple[str | None, str | None]:
    """The last step: write the report unless the one in ``out`` was built from this very
    database state. Return the database state now and the one the folder's report was built
    from (None: no report), which :func:`run_demo` stores for the next run's cache check."""
    db_now = _db_state(db)
    # the database state the report in the folder was built from (None: no report)
    report_db = state.get("report_db") if state.get("inputs") == inputs else None
    if report:
        if (
            report_db == db_now
            and state.get("run_ids") == run_ids
            and (out / REPORT_NAME).is_file()
        ):
            _say(f"[{n_steps}/{n_steps}] report unchanged (nothing new in the database)")
        else:
            _say(f"[{n_steps}/{n_steps}] writing the report")
            _write_report(db, out, run_ids, n_photos)
            # the report may add to the database (its cached tables): the state is after it
            db_now = report_db = _db_state(db)
    return db_now, report_db


def _cells_text(suite_name: str, shifts, cells) -> str:
    """What a step evaluates, counted one way for every suite: the clean cell plus the
    shifted cells, and how the shifts make them (``imagenet9``: 6 scenarios, 6 cells;
    ``ximagenet12``: 12 scenarios, one of them at two levels, 13 cells)."""
    levels: dict[str, list[str]] = {}
    for c in cells:
        levels.setdefault(c.shift, []).append(c.key)
    what = _what(suite_name, len(shifts))
    counts = {len(v) for v in levels.values()}
    if len(counts) == 1 and counts != {1}:
        unit = "severities" if suite_name == "imagenet-c" else "levels"
        detail = f"{what} x {counts.pop()} {unit}"
    else:
        several = [f"{s} at {len(v)}: {', '.join(v)}" for s, v in levels.items() if len(v) > 1]
        detail = "; ".join([what, *several])
    return f"clean + {len(cells)} shifted cell{'s' * (len(cells) != 1)} ({detail})"


def _what(suite_name: str, n: int) -> str:
    """What a suite's shifts are called in its step line (the suites shift different things)."""
    if suite_name == "imagenet-c":
        name = "corruption"
    elif suite_name == "imagenet-e":
        name = "attribute edit"
    else:
        name = "scenario"
    return f"{n} {name}{'s' * (n != 1)}"


def _write_report(db: Path, out: Path, run_ids: list[str], n_photos: int) -> None:
    """Build ``<out>/report.html`` from the demo's runs and print the report's notes."""
    from robustlab.workflows.report import build_report

    result = build_report(
        db,
        out / REPORT_NAME,
        run_ids=run_ids,
        title=f"robustlab demo: {DEMO_MODEL} on {n_photos} photos",
    )
    for note in result.notes:
        _say(f"    note: {note}")


def _finish(out: Path, db: Path, run_ids: list[str], report: bool, t0: float) -> int:
    """Print the summary read back from the database and where everything is."""
    from robustlab.store import Store

    summary = demo_summary(Store(db), run_ids)
    print(summary)
    print(f"\ndatabase: {db}")
    if report:
        print(f"report:   {out / REPORT_NAME}")
    print(f"numbers:  robustlab results --db {db}")
    _say(f"demo finished in {time.perf_counter() - t0:.1f} s")
    return 0


def demo_summary(store, run_ids) -> str:
    """A few lines read back from the database: clean accuracy and mean accuracy per suite."""
    from robustlab.store import CLEAN_SHIFT

    cells = store.cell_table(list(run_ids))
    runs = {r: store.get_run(r) for r in run_ids}
    lines = []
    clean = cells[cells["shift"] == CLEAN_SHIFT]
    # The first run's clean cell (ImageNet-C's crop): ImageNet-E's clean images are its own
    # 256x256 frame, so the clean cells of the suites need not agree.
    import pandas as pd

    clean = pd.concat([clean[clean["run_id"] == r] for r in run_ids] + [clean.iloc[:0]])
    if not clean.empty:
        first = clean.iloc[0]
        lines.append(
            f"{DEMO_MODEL} on {int(first['n'])} demo photos, clean top-1: "
            f"{100 * float(first['top1']):.1f}%"
        )
    for rid in run_ids:
        part = cells[(cells["run_id"] == rid) & (cells["shift"] != CLEAN_SHIFT)]
        if part.empty:
            continue
        lines.append(
            f"  {runs[rid]['suite']}: mean top-1 over {len(part)} cells "
            f"{100 * float(part['top1'].mean()):.1f}%"
        )
    return "\n".join(lines)
