"""The ImageNet-D prompt grid: classes x nuisances x N images per pair, as data.

ImageNet-D (REFERENCE.md section 5) prompted Stable Diffusion with every (class, nuisance)
pair, for instance "a backpack in a wheat field", but its authors never published the
prompt templates. What is published, and shipped here with attribution
(``data/assets/imagenet_d``, MIT), is the three nuisance vocabularies: 468 background
scenes (Places365-style names such as ``living_room-s``), the 47 DTD texture names and 32
material names. The templates below are this project's approximation, kept as data so a
user can replace them (``templates=`` / ``robustlab synth --templates FILE``):

=========== ==========================================
subset      template
=========== ==========================================
background  ``a photo of {a_cls} in the {nuisance}``
texture     ``a photo of {a_cls} with {a_nuisance} texture``
material    ``a photo of {a_cls} made of {nuisance}``
=========== ==========================================

Placeholders: ``{cls}`` the class's readable name, ``{a_cls}`` the same with "a"/"an",
``{nuisance}`` the nuisance's readable name, ``{a_nuisance}`` with its article. Readable
names follow ImageNet-D's CLIP normalisation for classes (``_`` and ``-`` become spaces,
``/`` becomes " or ") and, for nuisances, drop the scene suffix ``-s`` and turn ``_`` and
``-`` into spaces (``apartment_building-outdoor-s`` -> "apartment building outdoor").

Every image of the grid has a seed from the seed rule,
``derive_seed(seed, class_folder, "synth/<subset>/<nuisance>", k)``, so an image never
depends on batch size, order, or which other classes were asked for.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from robustlab.errors import InputError, MissingResourceError
from robustlab.seeding import derive_seed

# Built-in nuisance vocabularies (data/assets/imagenet_d/<name>.csv, header code,name).
VOCABULARIES = ("background", "texture", "material")

TEMPLATES: dict[str, str] = {
    "background": "a photo of {a_cls} in the {nuisance}",
    "texture": "a photo of {a_cls} with {a_nuisance} texture",
    "material": "a photo of {a_cls} made of {nuisance}",
}
# A vocabulary of the user's own (a CSV) without its own template uses this one.
DEFAULT_TEMPLATE = "a photo of {a_cls} with {nuisance}"
PLACEHOLDERS = ("cls", "a_cls", "nuisance", "a_nuisance")


@dataclass(frozen=True)
class Vocabulary:
    """One nuisance list: its subset name (the first folder of the layout) and its names.

    Attributes:
        subset: ``background``, ``texture``, ``material`` or a user CSV's file stem.
        names: Raw names in file order (``living_room-s``), unique.
        source: Where they come from (for the manifest).
    """

    subset: str
    names: tuple[str, ...]
    source: str


@dataclass(frozen=True)
class PromptItem:
    """One image to synthesise.

    Attributes:
        file: Path relative to the output root, ``<subset>/<class folder>/<id>.png``.
        subset, class_folder, class_name, nuisance, k: The grid coordinates.
        prompt: The text given to the model.
        seed: Seed of the diffusion noise (the seed rule, see the module docstring).
    """

    file: str
    subset: str
    class_folder: str
    class_name: str
    nuisance: str
    k: int
    prompt: str
    seed: int


def _asset(name: str):
    return resources.files("robustlab.data").joinpath("assets", "imagenet_d", name)


def class_display(name: str) -> str:
    """ImageNet-D's name normalisation: ``_``/``-`` -> space, ``/`` -> " or ", lower case."""
    text = name.replace("_", " ").replace("-", " ").replace("/", " or ").lower()
    return " ".join(text.split())


def nuisance_display(name: str) -> str:
    """Readable nuisance: drop the Places365 scene suffix ``-s``; ``_``/``-`` -> space."""
    text = name[:-2] if name.endswith("-s") else name
    return " ".join(text.replace("_", " ").replace("-", " ").split())


def with_article(text: str) -> str:
    """ "an alarm clock", "a backpack": the article English spelling usually takes."""
    return ("an " if text[:1].lower() in "aeiou" else "a ") + text


def slug(name: str) -> str:
    """A file-name-safe form of a nuisance name (letters, digits, ``_`` and ``-``)."""
    text = name[:-2] if name.endswith("-s") else name
    return re.sub(r"[^A-Za-z0-9_-]+", "_", text).strip("_") or "x"


def load_vocabulary(spec: str | Path) -> Vocabulary:
    """A built-in vocabulary by name, or a CSV of the user's own with a ``name`` column.

    Raises:
        MissingResourceError: the CSV file does not exist.
        InputError: unreadable CSV, no ``name`` column, no names, or a name twice.
    """
    key = str(spec).strip()
    if key.lower() in VOCABULARIES:
        text = _asset(f"{key.lower()}.csv").read_text(encoding="utf-8")
        subset, source = (
            key.lower(),
            f"ImageNet-D {key.lower()}.csv (chenshuang-zhang/imagenet_d, MIT)",
        )
        where = source
    else:
        path = Path(key).expanduser()
        if not path.is_file():
            raise MissingResourceError(
                f"nuisance vocabulary {key!r} is neither {', '.join(VOCABULARIES)} nor a CSV file",
                hint="pass a built-in name or the path of a CSV with a 'name' column",
            )
        try:
            text = path.read_text(encoding="utf-8-sig")
        except (OSError, UnicodeDecodeError) as exc:
            raise InputError(f"cannot read nuisance vocabulary {path}: {exc}") from None
        subset, source, where = slug(path.stem), f"user file {path.resolve()}", str(path)
    try:
        reader = csv.DictReader(text.splitlines())
        fields = [(f or "").strip().lower() for f in (reader.fieldnames or [])]
        rows = list(reader)
    except csv.Error as exc:
        raise InputError(f"cannot read nuisance vocabulary {where}: {exc}") from None
    if "name" not in fields:
        raise InputError(
            f"nuisance vocabulary {where} needs a 'name' column; it has {fields}",
            hint="a header line such as 'name' (optionally 'code,name')",
        )
    col = reader.fieldnames[fields.index("name")]
    names = [(r.get(col) or "").strip() for r in rows]
    names = [n for n in names if n]
    if not names:
        raise InputError(f"nuisance vocabulary {where} lists no names")
    seen: dict[str, str] = {}
    for n in names:
        s = slug(n)
        if s in seen:
            raise InputError(
                f"nuisance vocabulary {where}: {n!r} and {seen[s]!r} give the same file name {s!r}"
            )
        seen[s] = n
    return Vocabulary(subset, tuple(names), source)


def load_templates(spec: str | Path | Mapping[str, str] | None) -> dict[str, str]:
    """The templates per subset: the defaults, updated from a mapping or a CSV file.

    A CSV has columns ``subset,template``; a subset ``*`` sets the template of every
    subset it does not name.

    Raises:
        InputError: a bad CSV or a template with an unknown placeholder.
    """
    out = dict(TEMPLATES)
    if spec is None:
        return out
    if isinstance(spec, Mapping):
        given = {str(k): str(v) for k, v in spec.items()}
    else:
        path = Path(spec).expanduser()
        if not path.is_file():
            raise MissingResourceError(f"templates file {path} does not exist")
        try:
            rows = list(csv.DictReader(path.read_text(encoding="utf-8-sig").splitlines()))
        except (OSError, UnicodeDecodeError, csv.Error) as exc:
            raise InputError(f"cannot read templates file {path}: {exc}") from None
        if not rows or not {"subset", "template"} <= set(rows[0]):
            raise InputError(f"templates file {path} needs the columns subset,template")
        given = {r["subset"].strip(): r["template"].strip() for r in rows if r.get("subset")}
    if "*" in given:
        out = {k: given["*"] for k in out}
        out["*"] = given["*"]
    out.update({k: v for k, v in given.items() if k != "*"})
    for subset, template in out.items():
        check_template(template, subset)
    return out


def check_template(template: str, subset: str = "") -> None:
    """Refuse a template with a placeholder other than :data:`PLACEHOLDERS`."""
    try:
        template.format(**{p: "x" for p in PLACEHOLDERS})
    except (KeyError, IndexError, ValueError) as exc:
        raise InputError(
            f"template {template!r}{f' of {subset}' if subset else ''} is not usable: "
            f"{type(exc).__name__} {exc}",
            hint=f"placeholders are {', '.join('{' + p + '}' for p in PLACEHOLDERS)}",
        ) from None


def make_prompt(template: str, class_name: str, nuisance: str) -> str:
    cls, nui = class_display(class_name), nuisance_display(nuisance)
    return template.format(
        cls=cls, a_cls=with_article(cls), nuisance=nui, a_nuisance=with_article(nui)
    )


def select_classes(space, classes: Sequence[str] | None) -> list[int]:
    """Class indices of ``space``: all of them, or the named ones (folder, name or index).

    Raises:
        InputError: a name that is not a class of the space.
    """
    if not classes:
        return list(range(len(space)))
    out: list[int] = []
    for c in classes:
        try:
            i = space.index_of(str(c).strip())
        except ValueError as exc:
            raise InputError(
                str(exc), hint="see the label space's class folders or names"
            ) from None
        if i not in out:
            out.append(i)
    return out


def build_grid(
    space,
    vocabularies: Sequence[Vocabulary],
    *,
    classes: Sequence[int],
    per_pair: int,
    seed: int,
    templates: Mapping[str, str],
    max_nuisances: int | None = None,
) -> list[PromptItem]:
    """Every (subset, class, nuisance, k) item, in a fixed order.

    Args:
        space: The label space (class folders and readable names).
        vocabularies: Nuisance lists; their subset names must differ.
        classes: Class indices of ``space``.
        per_pair: Images per (class, nuisance) pair.
        seed: Global seed of the seed rule.
        templates: Template per subset (``*`` or :data:`DEFAULT_TEMPLATE` otherwise).
        max_nuisances: Use only the first N names of each vocabulary.
    """
    if per_pair < 1:
        raise InputError(f"images per pair must be at least 1, got {per_pair}")
    subsets = [v.subset for v in vocabularies]
    if len(set(subsets)) != len(subsets):
        raise InputError(f"two nuisance vocabularies share the subset name {subsets}")
    items = []
    for vocab in vocabularies:
        template = templates.get(vocab.subset) or templates.get("*") or DEFAULT_TEMPLATE
        names = vocab.names[:max_nuisances] if max_nuisances else vocab.names
        for ci in classes:
            folder, name = space.folders[ci], space.classes[ci]
            if not folder or folder.startswith(".") or "/" in folder or "\\" in folder:
                raise InputError(
                    f"class folder {folder!r} of label space {space.name!r} cannot be a folder name"
                )
            for nuisance in names:
                prompt = make_prompt(template, name, nuisance)
                for k in range(per_pair):
                    items.append(
                        PromptItem(
                            file=f"{vocab.subset}/{folder}/{slug(nuisance)}_{k:03d}.png",
                            subset=vocab.subset,
                            class_folder=folder,
                            class_name=name,
                            nuisance=nuisance,
                            k=k,
                            prompt=prompt,
                            seed=derive_seed(seed, folder, f"synth/{vocab.subset}/{nuisance}", k),
                        )
                    )
    return items


__all__ = [
    "VOCABULARIES",
    "TEMPLATES",
    "DEFAULT_TEMPLATE",
    "Vocabulary",
    "PromptItem",
    "load_vocabulary",
    "load_templates",
    "build_grid",
    "select_classes",
    "make_prompt",
    "class_display",
    "nuisance_display",
    "slug",
]
