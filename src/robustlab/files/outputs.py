"""Where ``generate`` writes: a local folder, or any fsspec URL (``s3://``, ``gs://``, ...).

Why one small interface over both: the work unit (:func:`robustlab.workflows.generate.process_sample`)
runs unchanged in this process, in local worker processes and on Ray workers, and only
needs "does this cell exist" and "write this cell atomically". A :class:`LocalFolder` does
that with a temp file and ``os.replace`` (the original local behaviour, no fsspec import);
a :class:`UrlFolder` does it through the filesystem fsspec finds for the URL's protocol.

Atomic visibility on a URL, i.e. what a rerun can trust after a crash:

- **Object stores** (:data:`ATOMIC_PUT`: S3, GCS, Azure...): one PUT makes the object
  appear complete or not at all (a multipart upload only appears when completed), so a
  cell is written with one ``pipe_file`` and no temp object; a killed run leaves nothing
  that looks finished, and no temp objects to list (listing millions of keys is costly).
- **Every other filesystem** (SFTP, HDFS, SMB, ``memory://``...): the bytes go to a
  hidden temp file next to the cell (``.<name>.<pid>.rltmp``) and are moved into place,
  as locally; a rerun deletes temp files left by dead writers.

The filesystem object travels with the job (fsspec filesystems pickle as their class and
storage options, fsspec's config from ``FSSPEC_<PROTOCOL>_<OPTION>`` variables and
``~/.config/fsspec`` included), so worker processes and Ray workers use the endpoint and
options the driver resolved; credentials that fsspec's config does not hold (AWS variables,
instance roles) are found by each node's own SDK, as usual.
"""

from __future__ import annotations

import contextlib
import pickle
import posixpath
import socket
import threading
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from robustlab.errors import (
    EnvironmentProblem,
    InputError,
    MissingResourceError,
    RobustlabError,
)
from robustlab.records.manifest import MANIFEST, load_manifest, manifest_lock, parse_manifest
from robustlab.files.atomic import (
    atomic_write,
    is_stale_array_temp,
    is_stale_temp,
    is_url,
    remove_temp_files,
    temp_name,
)

# Object stores where a single PUT is atomic: no temp object and no move needed.
ATOMIC_PUT = frozenset({"s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "adl", "oss"})
# Filesystems that live inside one process: worker processes would each see their own.
PROCESS_LOCAL = frozenset({"memory"})
PROBE = ".robustlab-write-check"
_LOCAL_PREFIXES = ("file://", "local://")


class LocalFolder:
    """An output folder on this machine's file system (or a mount every node shares)."""

    def __init__(self, root: Path):
        self.root = Path(root)

    @property
    def location(self) -> Path:
        return self.root

    def location_of(self, rel: str) -> Path:
        return self.root / rel

    def __str__(self) -> str:
        return str(self.root)

    def exists(self, rel: str) -> bool:
        return (self.root / rel).exists()

    def write(self, rel: str, data: bytes) -> None:
        atomic_write(self.root / rel, data)

    def read(self, rel: str) -> bytes | None:
        path = self.root / rel
        return path.read_bytes() if path.is_file() else None

    def lock(self) -> contextlib.AbstractContextManager:
        return manifest_lock(self.root)

    def load_manifest(self) -> dict | None:
        return load_manifest(self.root / MANIFEST)

    def remove_temp_files(self, shift_names: Sequence[str]) -> int:
        return remove_temp_files(self.root, shift_names)


# --------------------------------------------------------------------------- fsspec
_URL_LOCK = threading.Lock()


class UrlFolder:
    """An output folder behind an fsspec URL.

    Attributes:
        url: The URL as given (shown in messages and results).
        fs: The fsspec filesystem (pickled into every worker with its options).
        root: The folder's path inside ``fs`` (the URL without its protocol).
    """

    def __init__(self, url: str, fs: Any, root: str):
        self.url = url.rstrip("/")
        self._fs = fs
        self._fs_pickle: bytes | None = None
        self.root = root.rstrip("/")
        protocols = fs.protocol if isinstance(fs.protocol, (tuple, list)) else (fs.protocol,)
        self.protocols = frozenset(protocols)
        self.atomic_put = bool(self.protocols & ATOMIC_PUT)
        self.process_local = bool(self.protocols & PROCESS_LOCAL)

    def __getstate__(self) -> dict:
        # The filesystem travels as bytes, unpickled on first use: a worker (a Ray node)
        # without the protocol's package then fails in one line inside the work unit,
        # which reaches the driver, instead of failing to even receive its task.
        state = dict(self.__dict__)
        state["_fs_pickle"] = self._fs_pickle or pickle.dumps(self._fs)
        state["_fs"] = None
        return state

    @property
    def fs(self) -> Any:
        """The fsspec filesystem (with the options the driver resolved)."""
        if self._fs is None:
            assert self._fs_pickle is not None
            try:
                self._fs = pickle.loads(self._fs_pickle)
            except ImportError as exc:
                package = (exc.name or "the filesystem package").split(".")[0]
                raise MissingResourceError(
                    f"{self.url} needs {package} on {socket.gethostname()}, "
                    "where it is not installed",
                    hint=f"pip install {package} on every node that runs workers",
                ) from None
        return self._fs

    @property
    def location(self) -> str:
        return self.url

    def location_of(self, rel: str) -> str:
        return f"{self.url}/{rel}"

    def __str__(self) -> str:
        return self.url

    def _path(self, rel: str) -> str:
        return posixpath.join(self.root, rel) if rel else self.root

    def _call(self, doing: str, fn, *args, **kwargs):
        """Run one filesystem call; a failure that is not an ``OSError`` (a connection
        refused by the endpoint, an expired token) stops the run in one line."""
        try:
            return fn(*args, **kwargs)
        except OSError:
            raise
        except Exception as exc:  # noqa: BLE001 - any library's network error
            raise EnvironmentProblem(f"{doing} {self.url}: {_why(exc)}", hint=_hint(self)) from None

    def exists(self, rel: str) -> bool:
        path = self._path(rel)
        # Listings are cached per filesystem instance; another process may have written.
        self.fs.invalidate_cache(path)
        return bool(self._call("cannot read", self.fs.exists, path))

    def write(self, rel: str, data: bytes) -> None:
        """Write so that ``rel`` is absent or complete (see the module docstring)."""
        path = self._path(rel)
        if self.atomic_put:
            self._call("cannot write to", self.fs.pipe_file, path, data)
            return
        parent, name = posixpath.split(path)
        tmp = posixpath.join(parent, temp_name(name))
        self._call("cannot write to", self.fs.makedirs, parent, exist_ok=True)
        try:
            self._call("cannot write to", self.fs.pipe_file, tmp, data)
            self._call("cannot write to", self.fs.mv, tmp, path)
        except BaseException:
            with contextlib.suppress(Exception):
                self.fs.rm_file(tmp)
            raise

    def read(self, rel: str) -> bytes | None:
        path = self._path(rel)
        try:
            return self._call("cannot read", self.fs.cat_file, path)
        except FileNotFoundError:
            return None

    def remove(self, rel: str) -> None:
        """Delete one object (absent already: nothing to do)."""
        try:
            self._call("cannot delete from", self.fs.rm_file, self._path(rel))
        except FileNotFoundError:
            pass

    def lock(self) -> contextlib.AbstractContextManager:
        """A lock for one read-merge-write of the manifest, within this process only.

        An object store has no cross-process lock fsspec could take; the driver alone
        writes the manifest, so only two concurrent ``generate`` runs into one URL could
        lose one of their ``runs`` entries (never a file).
        """
        return _URL_LOCK

    def load_manifest(self) -> dict | None:
        data = self.read(MANIFEST)
        return None if data is None else parse_manifest(data, self.location_of(MANIFEST))

    def files_under(self, folders: Sequence[str]) -> set[str]:
        """Paths (relative to the root) of every file under the given folders."""
        out: set[str] = set()
        for name in folders:
            out.update(posixpath.relpath(p, self.root) for p in self._find(name))
        return out

    def _find(self, name: str) -> list[str]:
        """Every file under one folder, freshly listed (none when it does not exist)."""
        base = self._path(name)
        self.fs.invalidate_cache(base)
        try:
            return list(self._call("cannot list", self.fs.find, base))
        except FileNotFoundError:
            return []

    def remove_temp_files(self, shift_names: Sequence[str]) -> int:
        """Temp files of dead writers under the shift folders, and the release arrays'
        at the top of the root (:func:`robustlab.files.atomic.remove_temp_files`); none
        on object stores, which are written without temp objects."""
        if self.atomic_put:
            return 0
        self.fs.invalidate_cache(self._path(""))
        try:
            top = list(self._call("cannot list", self.fs.ls, self._path(""), detail=False))
        except FileNotFoundError:
            top = []
        stale = [p for p in top if is_stale_array_temp(posixpath.basename(p))]
        for name in shift_names:
            stale += [p for p in self._find(name) if is_stale_temp(posixpath.basename(p))]
        n = 0
        for path in stale:
            with contextlib.suppress(OSError):
                self.fs.rm_file(path)
                n += 1
        return n

    def check_writable(self) -> None:
        """Fail in one line, before any work, when the URL cannot take the output: a
        file instead of a folder, a missing bucket, no permission, an unreachable endpoint.

        A tiny probe object is written and deleted (a failed delete is ignored: a write-only
        role may not delete).
        """
        try:
            if self.root and self.fs.isfile(self.root):
                raise InputError(
                    f"--out {self.url} is a file; generate writes a folder of images",
                    hint="pass a folder URL (created if missing)",
                )
            if not self.atomic_put:
                self.fs.makedirs(self.root, exist_ok=True)
            probe = self._path(f"{PROBE}-{uuid.uuid4().hex[:8]}")
            self.fs.pipe_file(probe, b"")
        except RobustlabError:
            raise
        except TypeError as exc:  # s3fs and others pass options on at the first call
            raise _bad_option(self.url, exc) from None
        except FileNotFoundError as exc:
            raise MissingResourceError(
                f"cannot write to {self.url}: not found ({_why(exc, name=False)})",
                hint="create the bucket or folder first, or check the URL",
            ) from None
        except PermissionError as exc:
            raise EnvironmentProblem(
                f"cannot write to {self.url}: permission denied ({_why(exc, name=False)})",
                hint=_hint(self),
            ) from None
        except Exception as exc:  # noqa: BLE001 - any library's network or protocol error
            raise EnvironmentProblem(
                f"cannot write to {self.url}: {_why(exc)}", hint=_hint(self)
            ) from None
        with contextlib.suppress(Exception):
            self.fs.rm_file(probe)


def _why(exc: BaseException, *, name: bool = True) -> str:
    """An exception's first line, short enough for a one-line error."""
    text = (str(exc).strip().splitlines() or [""])[0]
    text = text if len(text) <= 160 else text[:157] + "..."
    if not name:
        return text or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _bad_option(url: str, exc: TypeError) -> InputError:
    return InputError(
        f"--out {url}: a storage option is not accepted by its filesystem ({_why(exc)})",
        hint="check storage_options= and the FSSPEC_<PROTOCOL>_* variables / fsspec config",
    )


def _hint(folder: UrlFolder) -> str:
    proto = sorted(folder.protocols)[0].upper()
    return (
        f"check the URL, the network and the credentials; endpoint and options come from "
        f"fsspec's config (e.g. FSSPEC_{proto}_ENDPOINT_URL), credentials from the "
        f"filesystem's usual places (AWS_* variables, ~/.aws, an instance role for S3)"
    )


def open_folder(out: Any, storage_options: dict | None = None) -> LocalFolder | UrlFolder:
    """The output folder ``out`` names: a path, a ``file://`` URL or any fsspec URL.

    A plain path or a ``file://`` URL is a :class:`LocalFolder` (no fsspec import, and
    the local file system's lock and rename); every other URL goes through fsspec, with
    ``storage_options`` passed to its filesystem on top of fsspec's config.

    Raises:
        MissingResourceError: the protocol's filesystem package (or fsspec) is missing;
            the message names what to pip install.
        InputError: a protocol fsspec does not know, or options given with a plain path.
    """
    if isinstance(out, (LocalFolder, UrlFolder)):
        return out
    text = str(out)
    if not is_url(text) or (text.startswith(_LOCAL_PREFIXES) and "::" not in text):
        if storage_options:
            raise InputError(
                "storage options apply to fsspec URLs (s3://...), not to a local --out"
            )
        local = text.split("://", 1)[1] if is_url(text) else text
        return LocalFolder(Path(local).expanduser())
    try:
        import fsspec.core
    except ImportError:
        raise MissingResourceError(
            f"--out {text} is a URL, which needs fsspec (not installed)",
            hint="pip install fsspec",
        ) from None
    try:
        fs, root = fsspec.core.url_to_fs(text, **(storage_options or {}))
    except ImportError as exc:
        proto, package = _missing_package(text, exc)
        raise MissingResourceError(
            f"{proto}:// needs {package}, which is not installed", hint=f"pip install {package}"
        ) from None
    except TypeError as exc:
        raise _bad_option(text, exc) from None
    except ValueError as exc:
        if "protocol not known" in str(exc).lower():
            raise InputError(
                f"--out {text}: fsspec knows no protocol {str(exc).rsplit(':', 1)[-1].strip()}",
                hint="use a local folder or a URL such as s3://bucket/prefix",
            ) from None
        raise InputError(f"--out {text}: {_why(exc)}") from None
    return UrlFolder(text, fs, root)


def _missing_package(url: str, exc: ImportError) -> tuple[str, str]:
    """(protocol, package to install) for the filesystem of ``url`` that failed to import."""
    from fsspec.registry import get_filesystem_class, known_implementations

    chain = [part.split("://", 1)[0] for part in url.split("::") if part]
    for proto in chain:
        try:
            get_filesystem_class(proto)
        except ImportError as inner:
            known = known_implementations.get(proto, {})
            module = str(known.get("class", "")).split(".", 1)[0]
            if module and module != "fsspec":
                return proto, module
            return proto, inner.name or module or proto
        except ValueError:
            continue
    return chain[0] if chain else "url", exc.name or "the filesystem package"


__all__ = ["ATOMIC_PUT", "LocalFolder", "UrlFolder", "open_folder"]
