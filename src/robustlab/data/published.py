"""Published benchmark sets read as downloaded: one ``--data`` folder each.

People who downloaded a benchmark should be able to evaluate on its files as they are, with
the benchmark's cells, label space and protocol, without converting anything. This module
recognises the released layouts by their names (and, for ImageNet-C's tree, one file's
size) and turns each into samples and cells; :func:`robustlab.workflows.evaluate.make_plan`
hands them to the runner.

==============  ==================================================  ==========  ===========
benchmark       layout (as released)                                cells       label space
==============  ==================================================  ==========  ===========
ImageNet-C      ``<corruption>/<severity 1..5>/<wnid>/<file>``      corruption  imagenet1k
                (or one ``<corruption>/`` folder)                   / severity
ImageNet-9      ``<variant>/val/<NN_class>/<file>`` (MadryLab's     variant     imagenet9
(bg_challenge)  backgrounds_challenge); ``original`` is clean       / default
XIMAGENET-12    ``<scenario>/<wnid>/<file>``; ``image``/            scenario    imagenet1k
                ``original`` is clean (see :data:`XIMAGENET_12`)    / level
ImageNet-D      ``<subset>/<class>/<file>``: one clean cell, the    clean       imagenet-d
                subset is the first folder of the sample id
Tiny-ImageNet-C ImageNet-C's tree with 64x64 files (and ImageNet    corruption  imagenet1k
                64x64-C); the 299 px ImageNet-C: 299x299 files      / severity
CIFAR-10-C      ``<corruption>.npy`` + ``labels.npy`` (arrays:       corruption  cifar10
                :mod:`robustlab.data.release_npy`)                  / severity
==============  ==================================================  ==========  ===========

The ImageNet-E archive (``ori/``, level folders, ``labels.txt``) has its own reader,
:mod:`robustlab.data.imagenet_e`.

A *sample* is one image across the cells: its id is the path inside a cell folder
(``n01440764/ILSVRC2012_val_00000293.JPEG``), the first folder is its class. The same id
in every cell folder is the same image under another shift, as the benchmarks publish
them. A sample missing from one cell folder is a counted skip of that cell (never a
substitute); folders and files that are not part of the layout are listed in
``skipped`` with the reason, as :func:`robustlab.data.sources.discover` does for a source
folder (each cell folder is listed by ``discover``, so its rules for hidden files,
symbolic links and odd names apply here too).

XIMAGENET-12's released folder names could not be established from a public source: its
code (github.com/XImageNet-12/XIMAGENET-12) writes ``image/<wnid>/<file>.JPEG`` for the
originals, ``masks/<wnid>/<stem>.png``, ``image_r``/``image_g``/``image_b``/
``image_rainbow`` for the colour scenarios, ``segmented_image/`` and
``segmented_image_transparent/<wnid>/<stem>_segmented.png``, and ``combine/`` for the
random-background scenario. Those names, robustlab's own scenario names (``blur_bg``,
``color_grey``, ...) and the paper's spelled-out names are all accepted (see
:data:`XIMAGENET_12`), and a file is matched across scenarios by its stem with a trailing
``_segmented`` removed; ``masks/`` is not a cell. docs/fidelity.md records this assumption.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from robustlab.cells import Cell
from robustlab.data.sources import Sample, discover
from robustlab.files.safety import OUTSIDE, dirs_inside, link_target
from robustlab.errors import InputError

# ImageNet-9 (bg_challenge): variant folder -> shift name (None: the clean cell).
IMAGENET_9 = {
    "original": None,
    "only_fg": "only_fg",
    "no_fg": "no_fg",
    "only_bg_b": "only_bg_b",
    "only_bg_t": "only_bg_t",
    "mixed_same": "mixed_same",
    "mixed_rand": "mixed_rand",
    "mixed_next": "mixed_next",
}
IMAGENET_9_SPLIT = "val"
# Folders the bg_challenge archive ships beside the variants that are not test images.
IMAGENET_9_EXTRA = {"fg_mask": "foreground masks (.npy), not a test variant"}

# XIMAGENET-12: scenario folder (lower case, '-' and ' ' read as '_') -> (shift, level);
# None is the clean cell. See the module docstring for where the names come from.
XIMAGENET_12: dict[str, tuple[str, str] | None] = {
    "image": None,
    "images": None,
    "original": None,
    "original_image": None,
    "blur_bg": ("blur_bg", "default"),
    "blur_background": ("blur_bg", "default"),
    "blurred_background": ("blur_bg", "default"),
    "blur_obj": ("blur_obj", "default"),
    "blur_object": ("blur_obj", "default"),
    "blur_fg": ("blur_obj", "default"),
    "blurred_foreground": ("blur_obj", "default"),
    "color_grey": ("color_grey", "default"),
    "color_gray": ("color_grey", "default"),
    "color_grayscale": ("color_grey", "default"),
    "image_grey": ("color_grey", "default"),
    "image_gray": ("color_grey", "default"),
    "color_r": ("color_r", "default"),
    "image_r": ("color_r", "default"),
    "color_g": ("color_g", "default"),
    "image_g": ("color_g", "default"),
    "color_b": ("color_b", "default"),
    "image_b": ("color_b", "default"),
    "rainbow": ("rainbow", "default"),
    "color_rainbow": ("rainbow", "default"),
    "image_rainbow": ("rainbow", "default"),
    "bright_bg": ("bright_bg", "default"),
    "bright_background": ("bright_bg", "default"),
    "bright_obj": ("bright_obj", "default"),
    "bright_object": ("bright_obj", "default"),
    "bright_fg": ("bright_obj", "default"),
    "segmented": ("segmented", "default"),
    "segmented_image": ("segmented", "default"),
    "seg_img": ("segmented", "default"),
    "transparent": ("transparent", "default"),
    "segmented_image_transparent": ("transparent", "default"),
    "transparent_image": ("transparent", "default"),
    # The reference adds the black-background object onto the photo (addWeighted): the
    # registry's "add" level of random_bg.
    "random_bg": ("random_bg", "add"),
    "random_background": ("random_bg", "add"),
    "rand_bg": ("random_bg", "add"),
    "combine": ("random_bg", "add"),
    "ai_bg": ("ai_bg", "default"),
    "ai_background": ("ai_bg", "default"),
    "ai_generated": ("ai_bg", "default"),
}
XIMAGENET_12_EXTRA = {"masks": "foreground masks, not a test scenario"}
XIMAGENET_12_STEM_SUFFIXES = ("_segmented",)

IMAGENET_D_SUBSETS = ("background", "texture", "material")
IMAGENET_D_EXTRA = {"questions": "the VLM protocol's question files (robustlab vlm reads them)"}

_WNID = re.compile(r"n\d{8}")
_IN9_CLASS = re.compile(r"\d\d_.+")


@dataclass(frozen=True)
class Layout:
    """One published benchmark layout.

    Attributes:
        name: Key (``"imagenet-c"``, ``"imagenet9"``, ``"ximagenet12"``, ``"imagenet-d"``).
        title: How the benchmark calls itself.
        benchmark_suite: The built-in suite whose cells these are (``--suite`` may name it).
        label_space: The label space its class folders belong to.
        source: Where the layout is described (for the run record).
        protocol: :class:`robustlab.suites.Protocol` fields applied to every file before
            the model's own preprocessing (see ``LAYOUTS`` for each benchmark's reason).
    """

    name: str
    title: str
    benchmark_suite: str
    label_space: str
    source: str
    protocol: dict[str, Any] = field(default_factory=dict)

    @property
    def suite(self) -> str:
        """The suite name runs on the published files are stored under: their pixels are
        the benchmark's files, not robustlab's on-the-fly shifts, so never the same runs."""
        return f"{self.name}-published"


LAYOUTS = {
    "imagenet-c": Layout(
        "imagenet-c",
        "ImageNet-C",
        "imagenet-c",
        "imagenet1k",
        "hendrycks/robustness: <corruption>/<severity>/<wnid>/<file>",
        # The files are 224x224 already; the official test script center-crops 224.
        {"resize": None, "crop": 224},
    ),
    "imagenet9": Layout(
        "imagenet9",
        "ImageNet-9 (backgrounds challenge)",
        "imagenet9",
        "imagenet9",
        "MadryLab/backgrounds_challenge bg_challenge: <variant>/val/<NN_class>/<file>",
        # The files are 224x224; the official in9_eval.py feeds them as they are (a center
        # crop of 224 leaves such a file unchanged and gives odd-sized ones the same shape).
        {"resize": None, "crop": 224},
    ),
    "ximagenet12": Layout(
        "ximagenet12",
        "XIMAGENET-12",
        "ximagenet12",
        "imagenet1k",
        "XImageNet-12/XIMAGENET-12 (folder names assumed from its code, docs/fidelity.md): "
        "<scenario>/<wnid>/<file>",
        # Photos of any size, as ImageNet's: the ximagenet12 suite's own protocol (shorter
        # side 256, center crop 224), so published and on-the-fly cells are comparable.
        {"resize": 256, "crop": 224},
    ),
    # The other official generators' releases. Tiny-ImageNet-C (and ImageNet 64x64-C) and
    # the 299 px ImageNet-C have ImageNet-C's folders; their files' size tells them apart
    # (see :func:`detect`). Their files are the benchmark's frame: read as they are, then
    # the model's resize (a 224 crop of a 64x64 file does not exist).
    "tiny-imagenet-c": Layout(
        "tiny-imagenet-c",
        "Tiny-ImageNet-C / ImageNet 64x64-C",
        "tiny-imagenet-c",
        "imagenet1k",
        "hendrycks/robustness make_tinyimagenet_c.py: <corruption>/<severity>/<wnid>/<file>, 64x64",
        {"resize": None, "crop": None},
    ),
    "imagenet-c-299": Layout(
        "imagenet-c-299",
        "ImageNet-C (299x299)",
        "imagenet-c-299",
        "imagenet1k",
        "hendrycks/robustness make_imagenet_c_inception.py: <corruption>/<severity>/<wnid>/<file>",
        {"resize": None, "crop": None},
    ),
    # CIFAR-10-C / CIFAR-100-C: arrays, not folders (robustlab.data.release_npy).
    "cifar-10-c": Layout(
        "cifar-10-c",
        "CIFAR-10-C",
        "cifar-c",
        "cifar10",
        "hendrycks/robustness make_cifar_c.py: <corruption>.npy (5 x N, 32, 32, 3), labels.npy",
        {"resize": None, "crop": None},
    ),
    "imagenet-d": Layout(
        "imagenet-d",
        "ImageNet-D",
        "imagenet-d",
        "imagenet-d",
        "chenshuang-zhang/imagenet_d: <subset>/<class>/<file>",
        # No protocol of its own here: read as a class tree with the default protocol.
    ),
}


@dataclass
class Published:
    """A published layout as read.

    Attributes:
        layout: Which benchmark.
        root: The data folder.
        samples: One per image id found in any cell folder, sorted by id; ``path`` is its
            clean file when the layout has one, else its first file.
        cells: (shift, level) of the shifted cells, in report order.
        folders: (shift, level) -> cell folder, relative to ``root``.
        clean: Folder of the clean cell, relative to ``root`` (None: the layout has none).
        names: (folder, sample id) -> file path inside the folder, only where the file is
            not named like the sample id (XIMAGENET-12's ``_segmented.png`` files).
        present: Cell folder -> the sample ids it holds.
        skipped: (relative path, reason) for everything that is not a usable input.
    """

    layout: Layout
    root: Path
    samples: list[Sample]
    cells: list[Cell]
    folders: dict[tuple[str, Any], str]
    clean: str | None
    names: dict[tuple[str, str], str] = field(default_factory=dict)
    present: dict[str, set[str]] = field(default_factory=dict)
    skipped: list[tuple[str, str]] = field(default_factory=list)

    def file(self, sample_id: str, folder: str) -> Path | None:
        """The file of one sample in one cell folder, or None when the folder lacks it."""
        if sample_id not in self.present.get(folder, ()):
            return None
        return self.root / folder / self.names.get((folder, sample_id), sample_id)


# ----------------------------------------------------------------------- detection
def _subdirs(path: Path) -> list[Path]:
    """The visible folders under ``path`` that the link rule lets a reader enter."""
    try:
        return list(dirs_inside(path))
    except OSError:
        return []


def _norm(name: str) -> str:
    return name.strip().lower().replace("-", "_").replace(" ", "_")


def _corruptions() -> set[str]:
    from robustlab.shifts.registry import list_shifts

    return {s.name for tag in ("imagenet-c", "imagenet-c-extra") for s in list_shifts(tag=tag)}


SEVERITIES = frozenset({"1", "2", "3", "4", "5"})


def _has_severities(path: Path) -> bool:
    return any(s.name in SEVERITIES for s in _subdirs(path))


def _is_imagenet_c(root: Path) -> bool:
    """The whole set (corruption folders), or one corruption's folder as its tar unpacks
    (``gaussian_noise/`` with severity folders: the corruption is the folder's name)."""
    names = _corruptions()
    if root.name in names and _has_severities(root):
        return True
    return any(d.name in names and _has_severities(d) for d in _subdirs(root))


# Corruption-folder layouts (ImageNet-C's tree), told apart by their files' side.
CORRUPTION_TREES = {"imagenet-c": None, "tiny-imagenet-c": 64, "imagenet-c-299": 299}


def _first_file(root: Path) -> Path | None:
    """One image file of an ImageNet-C-style tree (the first in name order), by the link rule."""
    from robustlab.files.safety import file_inside

    names = _corruptions()
    tops = [root] if root.name in names else [d for d in _subdirs(root) if d.name in names]
    for top in sorted(tops):
        for sev in sorted(d for d in _subdirs(top) if d.name in SEVERITIES):
            for cls in sorted(_subdirs(sev)):
                try:
                    entries = sorted(p.name for p in cls.iterdir() if not p.name.startswith("."))
                except OSError:
                    continue
                for name in entries:
                    path = file_inside(root, (cls / name).relative_to(root).as_posix())
                    if path is not None:
                        return path
    return None


def _tree_layout(root: Path) -> Layout:
    """ImageNet-C, or the 64 px or 299 px release, by the side of one of its images
    (read from the file's header; an unreadable one leaves it ImageNet-C)."""
    from PIL import Image

    path = _first_file(root)
    if path is not None:
        try:
            with Image.open(path) as img:
                size = img.size
        except Exception:  # noqa: BLE001 - the reader reports the file; the layout stays
            size = None
        for name, side in CORRUPTION_TREES.items():
            if side is not None and size == (side, side):
                return LAYOUTS[name]
    return LAYOUTS["imagenet-c"]


def _is_imagenet_9(root: Path) -> bool:
    return any(
        d.name in IMAGENET_9
        and any(_IN9_CLASS.fullmatch(c.name) for c in _subdirs(d / IMAGENET_9_SPLIT))
        for d in _subdirs(root)
    )


def _is_ximagenet_12(root: Path) -> bool:
    # A scenario folder (not the clean one) holding wnid folders: "image/" alone is any
    # data set's name, so it never decides.
    return any(
        XIMAGENET_12.get(_norm(d.name)) is not None
        and any(_WNID.fullmatch(c.name) for c in _subdirs(d))
        for d in _subdirs(root)
    )


def _is_imagenet_d(root: Path) -> bool:
    subdirs = _subdirs(root)
    subsets = [d for d in subdirs if d.name in IMAGENET_D_SUBSETS]
    others = [
        d for d in subdirs if d.name not in IMAGENET_D_SUBSETS and d.name not in IMAGENET_D_EXTRA
    ]
    return bool(subsets) and not others and any(_subdirs(d) for d in subsets)


def detect(root) -> Layout | None:
    """The published layout ``root`` holds, or None for any other folder.

    Only names are looked at, in this order: the CIFAR-10-C arrays (``labels.npy`` and a
    ``<corruption>.npy``), ImageNet-C (a corruption folder with severity folders; the
    header of one image tells Tiny-ImageNet-C's 64x64 and the 299 px release apart from
    it), ImageNet-9 (a variant folder with
    ``val/NN_class``), XIMAGENET-12 (a scenario folder with wnid folders), ImageNet-D
    (nothing but subset folders with class folders). A folder written by ``robustlab
    generate`` has a manifest and is read as such before this is asked.
    """
    root = Path(root)
    from robustlab.data.release_npy import is_release

    if is_release(root):
        return LAYOUTS["cifar-10-c"]
    if _is_imagenet_c(root):
        return _tree_layout(root)
    for name, test in (
        ("imagenet9", _is_imagenet_9),
        ("ximagenet12", _is_ximagenet_12),
        ("imagenet-d", _is_imagenet_d),
    ):
        if test(root):
            return LAYOUTS[name]
    return None


# ------------------------------------------------------------------------- reading
def _stray_files(path: Path, rel: str | None) -> list[tuple[str, str]]:
    """Files lying beside the cell folders (a README, an archive), and folder links that
    leave ``path`` (the link rule of :mod:`robustlab.files.safety`): listed, never inputs."""
    try:
        entries = sorted(p for p in path.iterdir() if not p.name.startswith("."))
    except OSError:
        return []
    inside = {p.name for p in _subdirs(path)}
    out = []
    for p in entries:
        name = f"{rel}/{p.name}" if rel else p.name
        if not p.is_dir():
            out.append((name, "not inside a cell folder"))
        elif p.name not in inside:
            out.append((name, OUTSIDE.format(target=link_target(str(p)))))
    return out


def _cell_folders(layout: Layout, root: Path):
    """(clean folder or None, {(shift, level): folder}, skipped) of a layout's root."""
    clean: str | None = None
    folders: dict[tuple[str, Any], str] = {}
    skipped: list[tuple[str, str]] = _stray_files(root, None)

    def claim(cell, rel: str) -> None:
        if cell in folders:
            skipped.append((rel, f"a second folder for {cell[0]}/{cell[1]} ({folders[cell]})"))
        else:
            folders[cell] = rel

    tree = layout.name in CORRUPTION_TREES
    if tree and root.name in _corruptions() and _has_severities(root):
        for s in _subdirs(root):
            if s.name in SEVERITIES:
                claim((root.name, int(s.name)), s.name)
            else:
                skipped.append((s.name, "not a severity folder (1 to 5)"))
    elif tree:
        names = _corruptions()
        for d in _subdirs(root):
            if d.name not in names:
                skipped.append((d.name, "not an ImageNet-C corruption folder"))
                continue
            skipped.extend(_stray_files(d, d.name))
            for s in _subdirs(d):
                if s.name in SEVERITIES:
                    claim((d.name, int(s.name)), f"{d.name}/{s.name}")
                else:
                    skipped.append((f"{d.name}/{s.name}", "not a severity folder (1 to 5)"))
    elif layout.name == "imagenet9":
        for d in _subdirs(root):
            if d.name not in IMAGENET_9:
                why = IMAGENET_9_EXTRA.get(d.name, "not an ImageNet-9 variant folder")
                skipped.append((d.name, why))
            elif not (d / IMAGENET_9_SPLIT).is_dir():
                skipped.append((d.name, f"has no {IMAGENET_9_SPLIT}/ folder"))
            else:
                skipped.extend(_stray_files(d, d.name))
                if IMAGENET_9[d.name] is None:
                    clean = f"{d.name}/{IMAGENET_9_SPLIT}"
                else:
                    claim((IMAGENET_9[d.name], "default"), f"{d.name}/{IMAGENET_9_SPLIT}")
    elif layout.name == "ximagenet12":
        for d in _subdirs(root):
            key = _norm(d.name)
            if key not in XIMAGENET_12:
                why = XIMAGENET_12_EXTRA.get(key, "not an XIMAGENET-12 scenario folder")
                skipped.append((d.name, why))
            elif XIMAGENET_12[key] is None:
                if clean is None:
                    clean = d.name
                else:
                    skipped.append((d.name, f"a second folder of original images ({clean})"))
            else:
                claim(XIMAGENET_12[key], d.name)
    else:
        raise ValueError(f"{layout.name} is read as a class tree, not by cell folders")
    return clean, folders, skipped


def _key(layout: Layout, sample_id: str) -> str:
    """The id under which a file is matched across cell folders."""
    if layout.name != "ximagenet12":
        return sample_id
    rel = PurePosixPath(sample_id)
    stem = rel.stem
    for suffix in XIMAGENET_12_STEM_SUFFIXES:
        if stem.endswith(suffix) and len(stem) > len(suffix):
            stem = stem[: -len(suffix)]
    return (rel.parent / stem).as_posix()


def read_published(root, layout: Layout) -> Published:
    """List a published layout's samples and cells (no image is opened).

    ImageNet-D has no cells of its own (each image is in one subset):
    :func:`robustlab.workflows.evaluate.make_plan` reads it as a class tree instead.

    Raises:
        InputError: no cell folder holds an image.
    """
    root = Path(root)
    clean, folders, skipped = _cell_folders(layout, root)
    order = ([clean] if clean is not None else []) + [
        folders[c] for c in sorted(folders, key=_cell_order(layout))
    ]
    first: dict[str, tuple[str, str, str | None]] = {}  # key -> (sample id, folder, class)
    found: list[tuple[str, str, str]] = []  # (folder, key, file inside the folder)
    for folder in order:
        try:
            listed = discover(root / folder)
        except InputError as exc:
            skipped.append((folder, str(exc).replace(str(root / folder), "this folder")))
            continue
        skipped.extend((f"{folder}/{rel}", why) for rel, why in listed.skipped)
        seen: dict[str, str] = {}
        for s in listed:
            if len(PurePosixPath(s.id).parts) != 2:
                skipped.append((f"{folder}/{s.id}", "not directly inside a class folder"))
                continue
            key = _key(layout, s.id)
            if key in seen:
                skipped.append((f"{folder}/{s.id}", f"same image as {folder}/{seen[key]}"))
                continue
            seen[key] = s.id
            first.setdefault(key, (s.id, folder, s.class_name))
            found.append((folder, key, s.id))
    present: dict[str, set[str]] = {}
    names: dict[tuple[str, str], str] = {}
    for folder, key, rel in found:
        sid = first[key][0]
        present.setdefault(folder, set()).add(sid)
        if rel != sid:
            names[(folder, sid)] = rel
    samples = []
    for sid, folder, cls in first.values():
        if clean is not None and sid in present.get(clean, ()):
            folder = clean
        path = root / folder / names.get((folder, sid), sid)
        samples.append(Sample(id=sid, path=path, class_name=cls))
    samples.sort(key=lambda s: s.id)
    if not samples:
        raise InputError(
            f"no images found in the {layout.title} folders of {root}",
            hint=f"the layout is {layout.source}",
        )
    cells = [Cell(*c) for c in sorted(folders, key=_cell_order(layout))]
    skipped.sort()
    return Published(layout, root, samples, cells, folders, clean, names, present, skipped)


def _cell_order(layout: Layout):
    """Report order: the registry's order of the benchmark's shifts, then the level."""
    from robustlab.shifts.registry import list_shifts

    tags = {
        "imagenet9": ("imagenet9",),
        "ximagenet12": ("ximagenet12",),
    }.get(layout.name, ("imagenet-c", "imagenet-c-extra"))
    rank = {s.name: i for i, s in enumerate(s for t in tags for s in list_shifts(tag=t))}
    return lambda cell: (rank.get(cell[0], len(rank)), *Cell(*cell).stored)


__all__ = [
    "IMAGENET_9",
    "IMAGENET_D_SUBSETS",
    "LAYOUTS",
    "XIMAGENET_12",
    "Layout",
    "Published",
    "detect",
    "read_published",
]
