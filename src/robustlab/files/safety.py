"""Path safety, one rule each, used by every command and every reader.

Why one module: the same three mistakes can happen wherever robustlab reads or writes a
path, and a rule enforced at only the reported spot leaves the others open.

1. **Outputs never clobber inputs.** :func:`check_outputs` compares every output path of a
   command with every input it holds (database, data folder, masks, labels, the other
   outputs) by their *real* paths (links and ``..`` resolved), and refuses, in one line,
   an output that is an input, lies inside an input folder, or is a folder holding an
   input. :func:`write_output` then writes a file output through a temp file renamed into
   place, and never replaces an existing file that is not the command's own kind of
   output (a report replaces an HTML page, never a DuckDB database) unless ``force``.
2. **Links never leave the data root.** :func:`walk_files` lists a folder for every
   reader (data folders, masks folders, generated folders, published layouts, the review
   app): a symbolic link, to a file or a folder, is followed only when its resolved target
   lies inside the root that is being read; any other link is skipped with a counted,
   logged reason. Each real folder is entered once, so a link back to an ancestor inside
   the root cannot multiply samples either. :func:`file_inside` applies the same rule to
   one path named by a CSV, a mask rule or an HTTP request, :func:`named_file` to a file
   a reader finds by its fixed name, and :func:`why_not_inside` says why a path failed.
3. **No folder is written into by surprise.** :func:`check_out_folder` refuses a
   non-empty output folder that the command did not make (its owner mark, written by
   :func:`claim_out_folder`, or its own record say it did), and
   :func:`refuse_write_through` keeps writers from following a link out of their folder.

A dataset assembled from other folders is therefore built from copies or hard links (or
by pointing ``--data`` at the real folder), never from links out of the root: a link to
``..``, ``/`` or ``/proc/self`` would otherwise pull unrelated files into a class.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from robustlab.errors import InputError, environment_errors

log = logging.getLogger(__name__)

OUTSIDE = "link leaves the folder being read (to {target}); only links inside it are followed"


def real(path: Any) -> Path:
    """``path`` with ``~``, ``..`` and every symbolic link resolved (it need not exist)."""
    return Path(os.path.realpath(os.path.expanduser(os.fspath(path))))


def _inside(path: Path, root: Path) -> bool:
    """Whether the real path ``path`` is ``root`` or lies under it (both already real)."""
    return path == root or path.is_relative_to(root)


# --------------------------------------------------------------------------- outputs
@dataclass(frozen=True)
class Folder:
    """An output folder of a command.

    Attributes:
        path: The folder.
        owned: True when the command fills the whole folder (generate, masks, synth...):
            then nothing else, input or output, may lie inside it. False for a folder the
            command only drops a few named files into (``results --export``, checkpoints).
    """

    path: Any
    owned: bool = True


@dataclass(frozen=True)
class Database:
    """The results database a command writes: never the same file as an input, but it may
    lie in an input folder (``--data .`` with the default ``./robustlab.duckdb``): no
    reader takes it for an image, and DuckDB refuses to open a file that is not one."""

    path: Any


def _is_url(path: Any) -> bool:
    from robustlab.files.atomic import is_url

    return is_url(path)


@dataclass(frozen=True)
class _Entry:
    flag: str
    given: Any
    real: Path
    kind: str  # "file", "folder" (an input folder), "owned", "shared" or "db"

    @property
    def folder(self) -> bool:
        return self.kind in ("folder", "owned", "shared")


def _clash(out: _Entry, other: _Entry) -> tuple[_Entry, str, _Entry] | None:
    """(a, relation, b) when output ``out`` and ``other`` overlap, read as "a is relation b"."""
    if out.real == other.real:
        return out, "the same " + ("folder" if out.folder else "file") + " as", other
    if _inside(out.real, other.real):
        if other.kind == "owned" or (other.kind == "folder" and out.kind != "db"):
            return out, "inside", other
    if _inside(other.real, out.real) and out.kind == "owned":
        return other, "inside", out
    return None


def check_outputs(inputs: Mapping[str, Any], outputs: Mapping[str, Any]) -> None:
    """Refuse, in one line, any output that would overwrite or mix with an input.

    Paths are compared by their real paths (``~``, ``..`` and links resolved), so a link
    or a detour names the same file. URLs are not compared.

    Args:
        inputs: ``flag -> path`` of everything the command reads (None entries and paths
            that do not exist are ignored); an existing folder is a folder input.
        outputs: ``flag -> path`` of a file the command writes, ``flag -> Folder`` of a
            folder it writes into, ``flag -> Database`` (None entries are ignored).
            Outputs are also checked against each other.

    Raises:
        InputError: an output is an input (the same real file or folder), lies inside an
            input folder (a database may), or is an owned output folder that holds an
            input or another output.
    """
    ins = []
    for flag, p in inputs.items():
        if p is None or _is_url(p) or not os.path.lexists(os.path.expanduser(os.fspath(p))):
            continue
        r = real(p)
        ins.append(_Entry(flag, p, r, "folder" if r.is_dir() else "file"))
    outs = []
    for flag, p in outputs.items():
        if p is None:
            continue
        if isinstance(p, Folder):
            given, kind = p.path, "owned" if p.owned else "shared"
        elif isinstance(p, Database):
            given, kind = p.path, "db"
        else:
            given, kind = p, "file"
        if given is None or _is_url(given):
            continue
        outs.append(_Entry(flag, given, real(given), kind))
    for i, out in enumerate(outs):
        for other in ins:
            found = _clash(out, other)
            if found:
                _refuse(*found)
        for other in outs[i + 1 :]:
            found = _clash(out, other) or _clash(other, out)
            if found:
                _refuse(*found)


def _refuse(a: _Entry, relation: str, b: _Entry) -> None:
    given = os.path.abspath(os.path.expanduser(os.fspath(a.given)))
    through = "" if str(a.real) == given else f" (real path {a.real})"
    raise InputError(
        f"{a.flag} {a.given} is {relation} {b.flag} {b.given}{through}; an output never "
        "overwrites or mixes with an input",
        hint="choose an output path apart from the inputs (links and '..' are followed)",
    )


# File kinds a command writes, and how an existing file of that kind is recognised.
_TEXT_SUFFIXES = {
    "html": (".html", ".htm"),
    "csv": (".csv", ".tsv"),
    "json": (".json",),
    "markdown": (".md", ".markdown"),
    "table": (".txt", ".text", ".out"),  # never a file without a suffix (a Makefile)
}


KIND_NAMES = {
    "html": "an HTML",
    "csv": "a CSV",
    "json": "a JSON",
    "markdown": "a Markdown",
    "table": "a text table",
    "parquet": "a Parquet",
}


def is_kind(path: Path, kind: str) -> bool:
    """Whether the existing file ``path`` is a ``kind`` file a command may replace.

    ``html``: a page (its text starts with ``<!doctype html`` or ``<html``); ``csv``,
    ``json``, ``markdown``, ``table``: UTF-8 text with a suffix of that kind; ``parquet``:
    Parquet's magic bytes. A database, an image or a script is never any of these.
    """
    try:
        with open(path, "rb") as fh:
            head = fh.read(4096)
    except OSError:
        return False
    if kind == "parquet":
        return head.startswith(b"PAR1")
    if b"\0" in head:
        return False
    try:
        text = head.decode("utf-8", "strict") if len(head) < 4096 else head[:4000].decode()
    except UnicodeDecodeError:
        return False
    if path.suffix.lower() not in _TEXT_SUFFIXES.get(kind, ()):
        return False
    if kind == "html":
        start = text.lstrip().lower()
        return start.startswith("<!doctype html") or start.startswith("<html")
    return True


def check_replaceable(path: Any, *, kind: str, flag: str, force: bool = False) -> None:
    """Refuse (one line) to replace an existing ``path`` that is a folder, or a file that
    is not a ``kind`` output, unless ``force`` (never a folder)."""
    p = Path(os.path.expanduser(os.fspath(path)))
    if p.is_dir():
        raise InputError(f"{flag} {path} is a folder; give a file name", hint="choose a file name")
    if p.exists() and not force and not is_kind(real(p), kind):
        raise InputError(
            f"{flag} {path} exists and is not {KIND_NAMES.get(kind, kind)} file, the kind "
            "this command writes; refusing to replace it",
            hint="choose another name, or pass --force to replace it",
        )


def write_output(path: Any, data: bytes | str, *, kind: str, flag: str, force: bool = False):
    """Write a command's file output: checked by :func:`check_replaceable`, then written
    to a temp file beside the target and renamed into place (a crash leaves the old file
    or the new one, never half of either). A link is written through to its target.

    Returns:
        The path written (as given, ``~`` expanded).
    """
    from robustlab.files.atomic import atomic_write

    check_replaceable(path, kind=kind, flag=flag, force=force)
    given = Path(os.path.expanduser(os.fspath(path)))
    body = data.encode("utf-8") if isinstance(data, str) else data
    with environment_errors(f"cannot write {flag} {path}"):
        atomic_write(real(given), body)
    return given


# --------------------------------------------------------------------------- output folders
# The hidden file a command leaves in an output folder it fills (``masks``, ``demo``,
# ``data``): proof that the folder is its own, so a rerun resumes there while any other
# non-empty folder is refused. Commands whose record is written before their first file
# (generate's and synth's manifest.json) are recognised by that record instead.
OWNER_MARK = ".robustlab-out.json"
OWNER_FORMAT = "robustlab-out/1"


def folder_owner(path: Any) -> str | None:
    """The command named by the owner mark of folder ``path`` (None: no readable mark)."""
    import json

    try:
        mark = json.loads((Path(path) / OWNER_MARK).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(mark, dict) or mark.get("format") != OWNER_FORMAT:
        return None
    owner = mark.get("command")
    return owner if isinstance(owner, str) else None


def check_out_folder(
    path: Any,
    *,
    command: str,
    flag: str,
    made: Any = None,
    allow_other: bool = False,
    allow_flag: str | None = "--into-existing",
) -> None:
    """Refuse, in one line, to fill a folder that already holds files ``command`` did not
    write: its files would mix with the output (a dataset gaining ``data/`` and a database,
    a user's PNGs taken for cached masks, an icon set overwriting same-named files).

    A missing or empty folder (hidden entries such as ``.DS_Store`` aside) is fine; so is
    one whose owner mark (:data:`OWNER_MARK`) names ``command``, or that ``made(folder)``
    recognises as the command's own by its record (a folder written before the mark
    existed), or any folder when ``allow_other`` (the command's ``allow_flag``).

    Raises:
        InputError: the folder holds other files.
    """
    folder = Path(os.path.expanduser(os.fspath(path)))
    if not folder.is_dir():
        return  # created by the command (or refused elsewhere: a file, a URL)
    with environment_errors(f"cannot list {flag} {path}"):
        entries = sorted(p.name for p in folder.iterdir() if not p.name.startswith("."))
    if not entries or allow_other or folder_owner(folder) == command:
        return
    if made is not None and made(folder):
        return
    shown = ", ".join(printable_name(n) for n in entries[:3]) + (
        ", ..." if len(entries) > 3 else ""
    )
    how = f", or pass {allow_flag} to write into it anyway" if allow_flag else ""
    raise InputError(
        f"{flag} {path} is not empty and was not made by robustlab {command} (it holds "
        f"{shown}); refusing to mix the output with its files",
        hint=f"choose a new or empty folder{how}",
    )


def claim_out_folder(path: Any, *, command: str) -> Path:
    """Create output folder ``path`` (parents too) and leave ``command``'s owner mark in
    it unless it has one, so a rerun is recognised by :func:`check_out_folder`. Called when
    the command starts writing, after every check passed."""
    import json

    folder = Path(os.path.expanduser(os.fspath(path)))
    with environment_errors(f"cannot create {path}"):
        folder.mkdir(parents=True, exist_ok=True)
        if folder_owner(folder) is None:
            from robustlab.files.atomic import atomic_write

            mark = {"format": OWNER_FORMAT, "command": command}
            atomic_write(folder / OWNER_MARK, json.dumps(mark).encode())
    return folder


# --------------------------------------------------------------------------- readers
def _dir_key(path: str) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_dev, st.st_ino


def _is_utf8(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:  # surrogate-escaped bytes of a non-UTF-8 name
        return False
    return True


def printable_name(name: str) -> str:
    """``name`` with bytes that are not UTF-8 shown as ``\\xNN`` (for logs and records)."""
    return os.fsencode(name).decode("utf-8", "backslashreplace")


def link_target(path: str) -> str:
    """Where a link points, for a skip reason (its text, escaped when not UTF-8)."""
    try:
        return printable_name(os.readlink(path))
    except OSError:
        return "?"


def walk_files(root: Any) -> tuple[list[PurePosixPath], list[tuple[str, str]]]:
    """Every regular file under ``root`` as a relative posix path, and what was left out.

    The one walk of every reader. Hidden files and folders are pruned (``.DS_Store``,
    ``.ipynb_checkpoints``, the temp files an interrupted ``generate`` leaves). A
    symbolic link, to a file or to a folder, is followed only when its resolved target
    lies inside ``root`` (the module's link rule); each real folder (device, inode) is
    entered once, so a link to a folder that lies under ``root`` anyway, or back to an
    ancestor, is skipped and the files keep the class of their real location.

    Returns:
        (files, skipped): sorted relative paths, and ``(relative path, reason)`` for links
        leaving the root, loops, repeated folders, broken links, unlistable folders, names
        that are not valid UTF-8 and anything that is not a regular file.
    """
    root_path = real(root)
    real_root = str(root_path)
    owned = _owned_folders(real_root)
    files: list[PurePosixPath] = []
    skipped: list[tuple[str, str]] = []
    visited = {_dir_key(real_root)}
    stack: list[tuple[str, PurePosixPath | None]] = [(real_root, None)]
    while stack:
        dirpath, base = stack.pop()
        subdirs = _scan_folder(dirpath, base, root_path, owned, visited, files, skipped)
        stack.extend(reversed(subdirs))
    n_out = sum(1 for _, why in skipped if why.startswith("link leaves"))
    if n_out:
        log.warning("%s: %d link(s) leading outside it were not followed", real_root, n_out)
    return files, skipped


def _owned_folders(real_root: str) -> dict[tuple[int, int], str]:
    """The folders reachable from ``real_root`` without following a link (hidden ones
    pruned), by (device, inode): they own their files, so a link to one of them is skipped
    and the files keep the class of their real location."""
    owned: dict[tuple[int, int], str] = {}
    for dirpath, dirnames, _ in os.walk(real_root):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        try:
            owned.setdefault(_dir_key(dirpath), Path(dirpath).relative_to(real_root).as_posix())
        except OSError:
            continue
    return owned


def _scan_folder(
    dirpath: str,
    base: PurePosixPath | None,
    root_path: Path,
    owned: dict[tuple[int, int], str],
    visited: set[tuple[int, int]],
    files: list[PurePosixPath],
    skipped: list[tuple[str, str]],
) -> list[tuple[str, PurePosixPath]]:
    """One folder of :func:`walk_files`' walk, in name order: append its regular files to
    ``files`` and what it leaves out (with the reason) to ``skipped``; return the
    subfolders to enter, marked ``visited`` so that each real folder is entered once."""
    try:
        with os.scandir(dirpath) as it:
            entries = sorted(it, key=lambda e: e.name)
    except OSError as exc:
        skipped.append(
            (printable_name(str(base or ".")), f"cannot list folder: {exc.strerror or exc}")
        )
        return []
    subdirs = []
    for e in entries:
        if e.name.startswith("."):
            continue
        rel = base / e.name if base is not None else PurePosixPath(e.name)
        if not _is_utf8(e.name):
            skipped.append(
                (printable_name(str(rel)), "name is not valid UTF-8 (rename it to use it)")
            )
            continue
        try:
            link = e.is_symlink()
            if link and not _inside(real(e.path), root_path):
                skipped.append((str(rel), OUTSIDE.format(target=link_target(e.path))))
                continue
            is_dir = e.is_dir()
            is_file = not is_dir and e.is_file()
            key = _dir_key(e.path) if is_dir else None
        except OSError as exc:
            skipped.append((str(rel), f"cannot read: {exc.strerror or exc}"))
            continue
        if key is not None:  # a folder
            repeat = _repeated_folder(link, key, owned, visited)
            if repeat is not None:
                skipped.append((str(rel), repeat))
            else:
                visited.add(key)
                subdirs.append((e.path, rel))
        elif is_file:
            files.append(rel)
        elif link:
            skipped.append((str(rel), "broken symbolic link"))
        else:
            skipped.append((str(rel), "not a regular file"))
    return subdirs


def _repeated_folder(
    link: bool, key: tuple[int, int], owned: dict[tuple[int, int], str], visited: set
) -> str | None:
    """Why a folder entry is not entered (a link to a folder listed under its own path, to
    the root itself, or to a folder already listed), or None to enter it."""
    if link and key in owned:
        where = owned[key]
        if where != ".":
            return f"link to a folder listed under its own path ({where})"
        return "link to the data folder itself (a loop)"
    if key in visited:
        return "link to a folder already listed (a loop)"
    return None


def file_inside(root: Any, rel: Any) -> Path | None:
    """``root / rel`` when it is a regular file whose real path lies inside ``root``,
    else None: the link rule for one path named by a CSV row, a mask rule or a request.

    ``rel`` may not be absolute or climb out with ``..``; a link inside the root that
    points at another file inside it is fine.
    """
    rel_path = PurePosixPath(os.fspath(rel).replace("\\", "/"))
    if rel_path.is_absolute() or ".." in rel_path.parts:
        return None
    root_real = real(root)
    path = Path(root) / rel_path
    target = real(path)
    if not _inside(target, root_real) or target == root_real:
        return None
    try:
        return path if target.is_file() else None
    except OSError:
        return None


def first_link_out(root: Any, rel: Any) -> Path | None:
    """The first symbolic link on the way from ``root`` to ``root / rel`` (a linked
    folder, or the file itself) that resolves outside ``root``, else None."""
    root_real = real(root)
    parts = PurePosixPath(os.fspath(rel).replace("\\", "/")).parts
    for depth in range(1, len(parts) + 1):
        part = Path(root).joinpath(*parts[:depth])
        if part.is_symlink() and not _inside(real(part), root_real):
            return part
    return None


def link_out(root: Any, rel: Any) -> str | None:
    """The skip reason of :func:`first_link_out`, else None: the link rule for a folder a
    reader enters by its fixed name (``questions/``)."""
    part = first_link_out(root, rel)
    return None if part is None else OUTSIDE.format(target=link_target(str(part)))


def why_not_inside(root: Any, rel: Any) -> str:
    """Why :func:`file_inside` gives None for ``root / rel``, in the words of a skip
    reason: a link out of the root is named as one (with its target), never as "missing",
    so the user fixes the link instead of looking for a file that is there."""
    rel_path = PurePosixPath(os.fspath(rel).replace("\\", "/"))
    if rel_path.is_absolute() or ".." in rel_path.parts:
        return "an absolute path or one with '..' (names a file outside the folder)"
    path = Path(root) / rel_path
    leaving = link_out(root, rel_path)
    if leaving is not None:
        return leaving
    if not os.path.lexists(path):
        return "missing"
    if path.is_symlink() and not path.exists():
        return "broken symbolic link"
    return "not a regular file"


def named_file(root: Any, rel: Any, *, what: str) -> Path | None:
    """The file a reader looks up by its fixed name inside a folder it reads (an archive's
    ``labels.txt``, a generated folder's ``manifest.json``, a set's ``metadata.csv``):
    ``root / rel`` under the link rule, None when there is nothing of that name.

    Raises:
        InputError: something of that name is there but is not a regular file inside
            ``root`` (a link out of it, a folder): the reason names it, in one line,
            instead of the folder being read as another layout or the file as missing.
    """
    found = file_inside(root, rel)
    if found is not None or not os.path.lexists(Path(root) / rel):
        return found
    raise InputError(
        f"{what} {Path(root) / rel}: {why_not_inside(root, rel)}",
        hint="copy the file into the folder (links may point only inside it)",
    )


def refuse_write_through(root: Any, rel_folder: str, flag: str) -> None:
    """The link rule for writers (``generate``'s cells, ``masks``, ``mine``'s subset):
    refuse to write into ``root/rel_folder`` when a folder on the way is a symbolic link
    out of ``root``, since the file would land, or replace one, outside the folder the
    user named.

    Raises:
        InputError: one line naming the link.
    """
    link = first_link_out(root, rel_folder) if rel_folder else None
    if link is not None:
        raise InputError(
            f"{flag} {root}: {link.relative_to(Path(root))} is a link out of it (to "
            f"{link_target(str(link))}); robustlab never writes through one",
            hint="replace the link by a real folder, or choose another folder",
        )


def outside(root: Any, path: Any) -> bool:
    """Whether an existing ``path`` (built from a CSV row, say) resolves outside ``root``
    or to something that is not a regular file: the link rule for a path a reader
    already holds. A missing path is not outside (the reader reports it as missing)."""
    if not os.path.lexists(path):
        return False
    target = real(path)
    return not (_inside(target, real(root)) and target.is_file())


class LinkRule:
    """:func:`outside` for the many files of one folder (export reads a generated one), with one
    ``lstat`` per file: a plain file lies where its folder does, and a folder that is no
    link where its parent does (each folder looked at once); a link, ``.`` or ``..`` is
    resolved in full."""

    def __init__(self, root: Path):
        self.root = root
        self.real_root = real(root)
        self.folders: dict[str, bool] = {os.fspath(root): True}

    def _resolved_inside(self, path: str) -> bool:
        target = real(path)
        return target == self.real_root or target.is_relative_to(self.real_root)

    def _folder_inside(self, folder: str) -> bool:
        if folder in self.folders:
            return self.folders[folder]
        parent, name = os.path.split(folder)
        if name in ("", ".", "..") or parent == folder:
            inside = self._resolved_inside(folder)
        else:
            try:
                link = stat.S_ISLNK(os.lstat(folder).st_mode)
            except OSError:
                link = True  # resolved in full below
            inside = self._resolved_inside(folder) if link else self._folder_inside(parent)
        self.folders[folder] = inside
        return inside

    def outside(self, path: Path) -> bool:
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            return False  # missing: the reader's own reason
        except OSError:
            return outside(self.root, path)
        if not stat.S_ISREG(mode) or os.path.basename(path) in ("", ".", ".."):
            return outside(self.root, path)  # a link (followed if it stays inside), a folder
        return not self._folder_inside(os.path.dirname(path))


def dirs_inside(root: Any) -> Iterable[Path]:
    """The visible folders directly under ``root`` that the link rule lets a reader enter
    (a linked folder only when it resolves inside ``root``), sorted by name."""
    root_real = real(root)
    for p in sorted(Path(root).iterdir()):
        if p.name.startswith(".") or not p.is_dir():
            continue
        if p.is_symlink() and not _inside(real(p), root_real):
            log.warning("%s: %s", p, OUTSIDE.format(target=link_target(str(p))))
            continue
        yield p


__all__ = [
    "OWNER_MARK",
    "Database",
    "Folder",
    "LinkRule",
    "check_out_folder",
    "check_outputs",
    "claim_out_folder",
    "first_link_out",
    "folder_owner",
    "link_out",
    "check_replaceable",
    "dirs_inside",
    "file_inside",
    "named_file",
    "outside",
    "why_not_inside",
    "is_kind",
    "printable_name",
    "real",
    "refuse_write_through",
    "walk_files",
    "write_output",
]
