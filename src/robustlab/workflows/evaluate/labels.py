"""Label indices of an evaluation's samples in its label space, with the one-line
errors that say which row or folder is wrong and what to pass instead.
"""

from __future__ import annotations

from pathlib import Path

from robustlab.errors import InputError


def _index_agrees(class_name: str, index: int, label: int) -> bool:
    """Whether a CSV row's ``index`` may mean its class: the label space's index of the
    class, or its ImageNet-1k index (the usual meaning of an ImageNet CSV's index column)."""
    if index == label:
        return True
    from robustlab.data.labels import get_label_space

    try:
        return int(get_label_space("imagenet1k").index_of(class_name)) == index
    except (KeyError, ValueError):
        return False


def subset_classes(samples, space):
    """Samples of ImageNet-D's ``<subset>/<class>/<file>`` tree with the class taken from the
    folder inside the subset (an ImageFolder reading would call every image "background").

    Only for the ``imagenet-d`` label space, only when every sample sits two folders deep
    under a subset folder, and never when a labels CSV gave the classes: the CSV is the
    user's word on each image (a review's export relabels images in place, its folder
    still names the old class), so a folder name must not overrule it. Anything else is
    returned as it is.
    """
    import dataclasses
    from pathlib import PurePosixPath

    from robustlab.data.published import IMAGENET_D_SUBSETS

    if getattr(space, "name", None) != "imagenet-d" or not samples:
        return samples
    if getattr(samples, "labels_csv", None) is not None:
        return samples
    parts = [PurePosixPath(s.id).parts for s in samples]
    if not all(len(p) == 3 and p[0] in IMAGENET_D_SUBSETS for p in parts):
        return samples
    out = type(samples)([dataclasses.replace(s, class_name=p[1]) for s, p in zip(samples, parts)])
    for attr in ("skipped", "layout", "labels_csv"):
        if hasattr(samples, attr):
            setattr(out, attr, getattr(samples, attr))
    return out


def _label_space_hint(class_name: str, space_name: str) -> str | None:
    """``--label-space imagenet1k`` when the class is an ImageNet-1k class (ImageNet photos
    evaluated with a suite whose own label space is another, such as imagenet9)."""
    if space_name == "imagenet1k":
        return None
    from robustlab.data.labels import get_label_space

    try:
        get_label_space("imagenet1k").index_of(class_name)
    except (KeyError, ValueError):
        return None
    return (
        f"{class_name!r} is an ImageNet-1k class: pass --label-space imagenet1k "
        "(label_space='imagenet1k' in Python)"
    )


def labels_for(samples, space, generated_from: Path | None = None) -> list[int]:
    """Label index per sample in ``space``; one-line ValueError for the first bad one.

    ``generated_from``: the source folder when the samples are a generated folder's (made
    with ``generate --unlabelled``), so an image without a label names what to pass."""
    n_classes = len(space.classes)
    out = []
    for s in samples:
        # The class name (a wnid, a readable name) is looked up in the label space; a bare
        # CSV index is used only when no class is given, since it may index another space.
        if s.class_name is not None:
            try:
                label = int(space.index_of(s.class_name))
            except (KeyError, ValueError):
                raise InputError(
                    f"{s.id}: class {s.class_name!r} is not in label space {space.name!r}",
                    hint=_label_space_hint(s.class_name, space.name),
                ) from None
            if s.label is not None and not _index_agrees(s.class_name, int(s.label), label):
                raise InputError(
                    f"labels CSV row {s.id!r}: index {s.label} contradicts class "
                    f"{s.class_name!r} (index {label} in label space {space.name!r})",
                    hint="fix the row, or drop the index column",
                )
        elif s.label is not None:
            label = int(s.label)
            if not 0 <= label < n_classes:
                raise InputError(
                    f"{s.id}: label {label} is outside label space {space.name!r} "
                    f"(0..{n_classes - 1})"
                )
        elif generated_from is not None:
            raise InputError(
                f"{s.id} has no label: the folder was generated from unlabelled images "
                f"({generated_from})",
                hint="pass --labels CSV (file,label) naming their classes",
            )
        else:
            raise InputError(
                f"{s.id} has no label",
                hint="use a class-folder tree (<class>/<file>) or pass --labels CSV (file,label)",
            )
        out.append(label)
    return out
