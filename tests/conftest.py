"""Shared fixtures: paths into ../shared/data, skipped with a message when it is absent."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

# Under xdist (the default run, ``-n auto``) each worker process computes with one thread,
# and so do the robustlab commands the tests start: N workers on N cores with N threads each
# spend much of their CPU on OpenMP threads waiting for each other. Set before torch is
# imported (conftest comes first); a test that wants more threads sets them itself.
if os.environ.get("PYTEST_XDIST_WORKER"):
    for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_var, "1")

# The full shared data (CI, developers) or, on a fresh clone, the compact copy in the
# repository (tests/fixtures/make_shared_mini.py builds it; same layout, fewer photos).
# ROBUSTLAB_TEST_SHARED_DATA=DIR points at another folder (/nonexistent: the mini copy).
MINI = Path(__file__).resolve().parent / "fixtures" / "shared-mini"
FULL = Path(
    os.environ.get("ROBUSTLAB_TEST_SHARED_DATA")
    or Path(__file__).resolve().parents[1].parent / "shared" / "data"
)
SHARED = FULL if FULL.is_dir() else MINI
SAMPLES = SHARED / "imagenet-samples"
REFERENCE_NPZ = SHARED / "imagenet_c_reference.npz"
REFERENCE_PNGS = SHARED / "imagenet_c_reference"

# Where the batched-shift tests (tests/test_batched_*.py) put their tensors: the CPU by
# default; ROBUSTLAB_TEST_SHIFT_DEVICE=cuda runs the same checks on a GPU, where CUDA's
# arithmetic (fused multiply-adds, its own libm) is what is under test.
SHIFT_DEVICE = os.environ.get("ROBUSTLAB_TEST_SHIFT_DEVICE", "cpu")


def on_device(t):
    """A torch tensor moved to ``SHIFT_DEVICE``."""
    return t.to(SHIFT_DEVICE)


def as_batch(imgs):
    """(N, H, W, 3) uint8 images as an (N, 3, H, W) batch on ``SHIFT_DEVICE``."""
    import torch

    x = torch.from_numpy(np.ascontiguousarray(np.asarray(imgs))).permute(0, 3, 1, 2)
    return on_device(x.contiguous())


def skip_unless_opencv_fuses() -> None:
    """Skip unless OpenCV computes its float grey as the reference's did: through IPP on a
    CPU with FMA (IPP's SSE4.2 code, or no IPP, rounds otherwise; ``OPENCV_IPP`` can
    force either). Tests that compare a grey formula with the library itself need it."""
    import cv2

    cpu = Path("/proc/cpuinfo")
    flags = cpu.read_text().split() if cpu.exists() else []
    forced = os.environ.get("OPENCV_IPP", "").lower()
    if not cv2.ipp.useIPP() or "fma" not in flags or forced in ("sse42", "disabled", "ssse3"):
        pytest.skip("OpenCV here does not compute its float grey with fused multiply-adds")


def as_images(x) -> np.ndarray:
    """An (N, 3, H, W) batch on any device as (N, H, W, 3) numpy images."""
    return x.permute(0, 2, 3, 1).cpu().numpy()


@pytest.fixture(autouse=True, scope="session")
def _content_hash_cache(tmp_path_factory):
    """robustlab's cache folder in a temp folder, never the user's ~/.cache (subprocesses
    inherit it). The kernels count as compiled, so the one-time "compiling" message never
    lands in the output of whichever test happens to run first (tests/test_kernels.py
    checks the message with a cache folder of its own)."""
    import os

    from robustlab.shifts.kernels import marker_path

    path = tmp_path_factory.mktemp("robustlab-cache")
    old = os.environ.get("ROBUSTLAB_CACHE_DIR")
    os.environ["ROBUSTLAB_CACHE_DIR"] = str(path)
    marker_path().touch()
    yield path
    if old is None:
        os.environ.pop("ROBUSTLAB_CACHE_DIR", None)
    else:
        os.environ["ROBUSTLAB_CACHE_DIR"] = old


def _need(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"shared test data not found at {path} (CI provides ../shared/data)")
    return path


@pytest.fixture(scope="session")
def full_samples_dir() -> Path:
    """All 500 photos of ../shared/data (tests whose claim needs the whole set)."""
    if not FULL.is_dir():
        pytest.skip(
            f"needs the full shared data at {FULL}: the 500 ImageNet photos "
            "(set ROBUSTLAB_TEST_SHARED_DATA to its folder)"
        )
    return FULL / "imagenet-samples"


@pytest.fixture(scope="session")
def samples_dir() -> Path:
    """Folder of real ImageNet photos with labels.csv: 500, or 120 scaled-down ones from
    the repository's compact copy."""
    return _need(SAMPLES)


@pytest.fixture(scope="session")
def reference():
    """The reference ImageNet-C outputs: (key -> uint8 (n, 224, 224, 3) mapping, meta dict).

    From the shared npz (five photos), or from the repository's compact PNG copy (``clean``
    for the five photos, the corruptions for the first one).
    """
    if REFERENCE_NPZ.exists() or not REFERENCE_PNGS.is_dir():
        data = np.load(_need(REFERENCE_NPZ))
        return data, json.loads(str(data["meta"]))
    from PIL import Image

    data = {}
    for png in REFERENCE_PNGS.glob("*.png"):
        stacked = np.asarray(Image.open(png))
        data[png.stem] = stacked.reshape(-1, 224, *stacked.shape[1:])
    return data, json.loads((REFERENCE_PNGS / "meta.json").read_text())


@pytest.fixture(scope="session")
def photo(samples_dir) -> np.ndarray:
    """One real 224x224 RGB photo (resize 256, center crop 224)."""
    from PIL import Image

    img = Image.open(samples_dir / "n01440764_tench.JPEG").convert("RGB")
    w, h = img.size
    s = 256 / min(w, h)
    img = img.resize((round(w * s), round(h * s)), Image.BILINEAR)
    w, h = img.size
    left, top = (w - 224) // 2, (h - 224) // 2
    return np.asarray(img.crop((left, top, left + 224, top + 224))).copy()


def make_masked_folder(samples_dir: Path, root: Path, n: int, step: float):
    """``n`` real photos in class folders under ``root/data``, each with an elliptic mask
    PNG under ``root/masks`` (ellipse centre moves down by ``step`` of the height per photo)."""
    import csv
    import shutil

    from PIL import Image

    data, masks = root / "data", root / "masks"
    with open(samples_dir / "labels.csv") as fh:
        rows = list(csv.DictReader(fh))[:n]
    for i, r in enumerate(rows):
        (data / r["wnid"]).mkdir(parents=True)
        (masks / r["wnid"]).mkdir(parents=True)
        shutil.copy(samples_dir / r["file"], data / r["wnid"] / r["file"])
        w, h = Image.open(samples_dir / r["file"]).size
        yy, xx = np.mgrid[:h, :w]
        m = ((yy - h * (0.45 + step * i)) / (0.3 * h)) ** 2 + ((xx - w / 2) / (0.25 * w)) ** 2 <= 1
        Image.fromarray(m.astype(np.uint8) * 255).save(
            masks / r["wnid"] / (r["file"].rsplit(".", 1)[0] + ".png")
        )
    return data, masks


def save_tiny_text2image(path: Path) -> Path:
    """A StableDiffusionPipeline with tiny random weights, saved with save_pretrained: the
    ``text2image`` folder of ``robustlab data tiny-checkpoints`` (the same builder)."""
    from robustlab.shifts.generative.tiny import save_text2image

    return save_text2image(path)


def dead_pid() -> int:
    """The pid of a process that has ended: what a killed writer leaves in its temp file's
    name or its run record."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def kill_after_first_file(cmd: list[str], out: Path, pattern: str, timeout: float = 120) -> None:
    """Start ``cmd``, SIGKILL it as soon as a file matching ``pattern`` exists under
    ``out`` (a crash in the middle of a run), and check that it really was killed."""
    import signal
    import subprocess
    import time

    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + timeout
        while time.time() < deadline and proc.poll() is None:
            if any(out.rglob(pattern)):
                break
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the run finished before it could be killed"


# Headless Chromium for the browser tests: Debian's package, driven by Playwright.
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]


def sync_playwright_or_skip():
    """Playwright's ``sync_playwright``, or a skip that says what is missing."""
    if not CHROMIUM.exists():
        pytest.skip(f"browser test needs Chromium at {CHROMIUM} (Debian package 'chromium')")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("browser test needs the playwright Python package (pip install playwright)")
    return sync_playwright


# Every table's laid-out width beside its box's, and the page's beside the window's.
_WIDTHS_JS = """() => ({
  tables: Array.from(document.querySelectorAll('table')).map(t => ({
    id: t.id || t.className,
    width: Math.ceil(t.getBoundingClientRect().width),
    box: t.parentElement.clientWidth,
    scroll: t.parentElement.scrollWidth,
  })),
  page: document.documentElement.scrollWidth,
  window: window.innerWidth,
})"""


@pytest.fixture(scope="session")
def _chromium_session():
    """One Playwright driver and one headless Chromium per test process, started by the
    first browser test (starting both costs about 3 s, and a run has a dozen such tests)."""
    sync_playwright = sync_playwright_or_skip()
    with sync_playwright() as p:
        try:
            b = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        except Exception as exc:  # noqa: BLE001 - any launch failure means no browser here
            pytest.skip(f"cannot launch Chromium: {str(exc).splitlines()[0]}")
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def browser(_chromium_session):
    """The process's Chromium, with every page and context a test opened closed after it
    (so each test starts from a browser with nothing open: no shared cookies or storage)."""
    yield _chromium_session
    for ctx in list(_chromium_session.contexts):
        ctx.close()


def report_widths(browser, html: Path, widths=(1280, 1920)) -> dict[int, dict]:
    """``{window width: {tables, page, window}}`` of the page ``html`` as Chromium lays it
    out at each window width (the report's tables must fit a 1280 px window: issue 37)."""
    got = {}
    for width in widths:
        page = browser.new_page(viewport={"width": width, "height": 900})
        page.goto(html.resolve().as_uri(), wait_until="load")
        got[width] = page.evaluate(_WIDTHS_JS)
        page.close()
    return got


def too_wide(layout: dict) -> list[dict]:
    """The tables of one :func:`report_widths` layout wider than their box (or scrolling in
    it), plus a pseudo-entry for a page wider than the window."""
    bad = [t for t in layout["tables"] if t["width"] > t["box"] or t["scroll"] > t["box"]]
    if layout["page"] > layout["window"]:
        bad.append({"id": "the page", "width": layout["page"], "box": layout["window"]})
    return bad


@pytest.fixture(scope="session")
def ray_cluster() -> str:
    """One Ray instance for the whole test run (starting one takes seconds): 2 CPUs and one
    declared GPU, so the model actors take the ``num_gpus=1`` path on a CPU-only machine
    (torch finds no CUDA there and the model runs on the CPU). Yields the address that
    ``--address`` takes, for CLI runs in subprocesses; in this process robustlab uses the
    running instance as it is."""
    import logging

    ray = pytest.importorskip(
        "ray",
        reason="the Ray backend tests need ray[data] (pip install "
        "'robustlab[ray]', part of the test extra)",
    )
    pytest.importorskip("ray.data")
    started = not ray.is_initialized()
    if started:
        ray.init(
            num_cpus=2,
            num_gpus=1,
            include_dashboard=False,
            log_to_driver=False,
            logging_level=logging.ERROR,
        )
    yield ray.get_runtime_context().gcs_address
    if started:
        ray.shutdown()


def pytest_configure(config):
    """A suite started in the background of a non-interactive shell (``cmd &``, nohup)
    inherits SIGINT ignored, and so would every robustlab command a test starts: Python
    then installs no KeyboardInterrupt handler, and the Ctrl-C tests (``review``'s server,
    the docs' review lines) wait for an exit that never comes. Handled here, SIGINT is back
    to its default in those commands (an exec resets a handled signal)."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    _compile_kernels_in_the_background(config)


def _compile_kernels_in_the_background(config) -> None:
    """In xdist's controller (which runs no tests): compile the corruptions' and ImageNet-E's
    numba kernels once, in a process of its own, while the workers collect. On a fresh clone nothing is
    compiled yet, and each worker compiled every kernel its first ImageNet-C test needed,
    both at about the same time: 23 CPU-s each, twice, on the critical path of the run. The
    workers then load the cached code (numba's own cache, as any later run does); a kernel
    needed before its cache is written is compiled by the worker as before."""
    import subprocess
    import sys

    if os.environ.get("PYTEST_XDIST_WORKER") or not config.getoption("numprocesses", None):
        return
    code = (
        "import numpy as np\n"
        "from robustlab.shifts.kernels import warm\n"
        "from robustlab.shifts.attributes.patchfill import patch_fill\n"
        "warm()\n"
        "hole = np.zeros((48, 48), bool); hole[16:32, 16:32] = True\n"
        "patch_fill(np.full((48, 48, 3), 128, np.uint8), hole)  # ImageNet-E's fill\n"
    )
    config._robustlab_warm = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


def pytest_unconfigure(config):
    proc = getattr(config, "_robustlab_warm", None)
    if proc is not None and proc.poll() is None:
        proc.kill()
    if proc is not None:
        proc.wait()


def _uses_a_module_fixture(item) -> bool:
    """Whether ``item`` asks for a module-scoped fixture (its module's or a conftest's)."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    return any(defs and defs[-1].scope == "module" for defs in info.name2fixturedefs.values())


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Every test that uses the session's Ray instance runs on one xdist worker
    (``--dist loadgroup`` in pyproject's addopts): a Ray instance costs seconds to start and
    keeps daemons busy, so two workers each starting one would pay that twice on a 2-core
    machine. The Ray group goes to the front of the collection, so the longest piece of work
    starts first where xdist hands out work in that order (from 3.7 it hands out the groups
    with the most tests first).

    Likewise the tests of one module that share a module-scoped fixture (evaluated photos,
    a saved checkpoint, loaded models) form one group named after the module, unless they
    carry a group already: handed out test by test, each worker that got some of them
    built the fixture again (and again whenever another module's tests came in between).
    The marks go on first (``tryfirst``): xdist's own hook turns them into the ``@group``
    suffix of the test ids by which it distributes work, and a mark added after it
    groups nothing. Without xdist the marks and the order change nothing a test can see."""
    first = []
    for item in items:
        if "ray_cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group("ray"))
            # a Ray cluster's start, daemons and shutdown cost 270 s of one worker's wall
            # time on 2 cores, the default run's tail: -m ray runs them (and CI does)
            item.add_marker(pytest.mark.ray)
            item.add_marker(pytest.mark.slow)
            first.append(item)
        elif _uses_a_module_fixture(item) and not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(item.module.__name__))
    chosen = {id(i) for i in first}
    items[:] = first + [i for i in items if id(i) not in chosen]


@pytest.fixture
def two_torch_threads():
    """torch with 2 threads for one test, whatever the xdist worker's default of 1: for
    numbers fixed on this project's 2-core machine with torch's default there (the golden
    float sums of tests/test_train_loop.py) and for a local run compared byte for byte with a
    Ray actor that computes with the node's 2 CPUs."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(threads)


# What a float forward pass promises on every x86-64 CPU when the thread count, the batch
# size or the machine changes: oneDNN picks other kernels and summation orders (AVX2 or
# AVX-512, one split or another), so the last bits of the logits move. The same top-5
# classes and probabilities within this (absolute) tolerance hold everywhere; bit-equal
# logits hold only on one machine with one thread count and one batch, and no test claims
# more than that.
PROB_ATOL = 1e-4


def assert_same_predictions(a, b, atol: float = PROB_ATOL) -> None:
    """Two B x C logit tensors give the same top-5 classes per row (as a set: two classes
    within rounding of each other may swap places) and softmax probabilities within
    ``atol``."""
    import torch

    assert a.shape == b.shape
    pa, pb = torch.softmax(a.float(), 1), torch.softmax(b.float(), 1)
    assert torch.allclose(pa, pb, rtol=0, atol=atol), float((pa - pb).abs().max())
    for row, (x, y) in enumerate(zip(a.topk(5).indices, b.topk(5).indices, strict=True)):
        assert set(x.tolist()) == set(y.tolist()), f"row {row}: top-5 {x} vs {y}"


class RunsACommand:
    """What a doctored pickle would hold: unpickling it with plain pickle calls os.system
    (``touch MARKER``). A reader that refuses it leaves no marker."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


class StopAfter:
    """A transform that behaves like Ctrl-C arriving while image ``n`` is prepared (a
    runner's interrupt tests)."""

    def __init__(self, inner, n: int):
        self.inner, self.n, self.calls = inner, n, 0

    def __call__(self, img):
        self.calls += 1
        if self.calls > self.n:
            raise KeyboardInterrupt
        return self.inner(img)
