"""Generated sets as the community loads them: Hugging Face datasets (Parquet shards) and
WebDataset tar shards, written and read back.

Why here, with no ``datasets`` or ``webdataset`` import: the shards are plain Parquet and
plain tar. The Parquet schema carries the ``huggingface`` metadata that
``datasets.load_dataset`` reads its features from (an ``Image`` column of ``{bytes,
path}``, a ``ClassLabel``), so robustlab writes them with pyarrow alone and the base
install stays light; the two packages are the user's to load the result with (the
``[export]`` extra).

One row per image (a sample's clean source photo or one of its cells), with the same
metadata in both formats (:data:`COLUMNS`): a Parquet column each, or one JSON file per
WebDataset sample beside the image (``<key>.jpg`` / ``<key>.png`` and ``<key>.json``). The
image is the stored file's bytes as they are (never decoded, never re-encoded: the pixels
are the folder's), and ``content_hash`` its BLAKE2b-128 (the digest ``generate`` records,
:mod:`robustlab.files.hashes`), which every reader checks as it reads the bytes.

``robustlab`` (a JSON object per row) says how ``evaluate`` reads the row back: ``read``
(``source``: a source photo, prepared by the protocol as evaluate prepares a source;
``stored``: a generated file, decoded as it is; ``file``: a mined file, read as a
published cell file is) and the ``protocol``. Per row, so that a dataset that went
through ``datasets`` (``save_to_disk``, a filter) still says it: ``datasets`` keeps the
columns, not a file beside them.

Readers (:func:`open_export`) take the three shapes: a folder written by ``robustlab
export`` in either format, and a Hugging Face dataset saved with ``save_to_disk`` (Arrow
stream files). Shards are listed with :func:`robustlab.files.safety.walk_files` (the link rule),
and only metadata is read to index them: an image's bytes are read when its cell is
evaluated (:class:`ShardReader`: a tar member by offset, a Parquet row group, a
memory-mapped Arrow file).
"""

from __future__ import annotations

import json
import os
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from robustlab.cells import level_key
from robustlab.errors import InputError, environment_errors
from robustlab.files.atomic import fsync_path, is_stale_temp, temp_name

FORMAT = "robustlab-export/1"
RECORD = "robustlab-export.json"  # the export's own record (provenance, shards, skips)
SPLIT = "test"
HF_DIR = "data"
# Rows per Parquet row group: what a reader decodes to get one image (datasets' own
# choice for image datasets); about 2 MB of ImageNet-C JPEGs.
ROW_GROUP = 100
# Per-row metadata, in column order after ``image``; JSON-valued ones as text in Parquet.
COLUMNS = (
    "label",
    "class_name",
    "source_id",
    "shift",
    "level",
    "seed",
    "suite",
    "label_space",
    "params",
    "attributes",
    "review",
    "content_hash",
    "robustlab",
)
JSON_COLUMNS = ("params", "attributes", "review", "robustlab")
READS = ("source", "stored", "file")


@dataclass(frozen=True)
class Row:
    """One exported image's metadata.

    Attributes:
        source_id: The sample id in the folder it came from (``n01440764/x.JPEG``): the key
            of the seed rule and of a run's predictions.
        class_name: Its class (a wnid, an ImageNet-D folder name), None when unlabelled.
        label: Its index in ``label_space``, -1 when it has none.
        shift, level: The cell (``clean``/``0`` for the source photo).
        seed: The seed of the folder's seed rule (None when it has none).
        suite: The suite the folder was generated for (None: a clean set).
        label_space: The label space its labels index.
        params: The shift's recorded parameters at this level.
        attributes: What the edit achieved (ImageNet-E's ``attributes.csv`` row), or the
            prompt of a synthesised image; None when none.
        review: The review verdict (a review export's columns), None when not reviewed.
        content_hash: BLAKE2b-128 of the image's bytes.
        robustlab: How ``evaluate`` reads it back (``read``, ``protocol``, ...).
        path: The image's path relative to the folder it came from.
    """

    source_id: str
    class_name: str | None
    label: int
    shift: str
    level: str
    seed: int | None
    suite: str | None
    label_space: str
    params: Any
    attributes: dict | None
    review: dict | None
    content_hash: str
    robustlab: dict
    path: str

    @property
    def read(self) -> str:
        return str(self.robustlab.get("read"))

    def values(self) -> dict[str, Any]:
        """The metadata as JSON values (a WebDataset sample's ``.json``)."""
        return {c: getattr(self, c) for c in COLUMNS} | {"path": self.path}

    def columns(self) -> dict[str, Any]:
        """The metadata as Parquet column values (JSON-valued ones as text)."""
        out = self.values()
        out.pop("path")
        for c in JSON_COLUMNS:
            if out[c] is not None:
                out[c] = to_json(out[c])
        return out


def to_json(value: Any) -> str:
    """JSON text of a metadata value; numpy numbers and arrays (a shift's parameter
    table) as their Python values."""
    return json.dumps(value, sort_keys=True, default=_plain)


def _plain(value: Any) -> Any:
    tolist = getattr(value, "tolist", None)
    return tolist() if callable(tolist) else str(value)


def row_from(meta: dict, path: str | None = None) -> Row:
    """A :class:`Row` from a Parquet row's columns or a sample's JSON (JSON-valued
    columns as text or as objects alike).

    Raises:
        InputError: a field is missing or of the wrong kind.
    """
    values = dict(meta)
    try:
        for c in JSON_COLUMNS:
            if isinstance(values.get(c), str):
                values[c] = json.loads(values[c])
        robust = values["robustlab"]
        if not isinstance(robust, dict) or robust.get("read") not in READS:
            raise ValueError("robustlab: no read rule")
        seed = values.get("seed")
        return Row(
            source_id=str(values["source_id"]),
            class_name=None if values.get("class_name") is None else str(values["class_name"]),
            label=int(values["label"]) if values.get("label") is not None else -1,
            shift=str(values["shift"]),
            level=level_key(values["level"]),
            seed=None if seed is None else int(seed),
            suite=None if values.get("suite") is None else str(values["suite"]),
            label_space=str(values["label_space"]),
            params=values.get("params"),
            attributes=values.get("attributes"),
            review=values.get("review"),
            content_hash=str(values["content_hash"]),
            robustlab=robust,
            path=str(path if path is not None else values.get("path") or values["source_id"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise InputError(f"an exported row's metadata is not robustlab's: {exc}") from None


# --------------------------------------------------------------------------- writing
def image_ext(data: bytes, path: str) -> str:
    """The extension a WebDataset decoder keys on: ``jpg`` or ``png`` by the bytes' magic,
    else the file's own suffix (lower case)."""
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        return "png"
    if data[:3] == b"\xff\xd8\xff":
        return "jpg"
    return PurePosixPath(path).suffix.lstrip(".").lower() or "bin"


def hf_features(class_names: Sequence[str] | None) -> dict:
    """The ``datasets`` features of the Parquet columns, as ``datasets`` stores them in the
    schema's ``huggingface`` metadata (``Image``; ``ClassLabel`` over the label space)."""
    text = {"dtype": "string", "_type": "Value"}
    label = (
        {"names": list(class_names), "_type": "ClassLabel"}
        if class_names
        else {"dtype": "int64", "_type": "Value"}
    )
    return {
        "image": {"_type": "Image"},
        "label": label,
        **{c: text for c in COLUMNS if c not in ("label", "seed")},
        "seed": {"dtype": "int64", "_type": "Value"},
    }


def parquet_schema(class_names: Sequence[str] | None):
    """The pyarrow schema of a Parquet shard, with its ``huggingface`` metadata."""
    import pyarrow as pa

    fields = [pa.field("image", pa.struct([("bytes", pa.binary()), ("path", pa.string())]))]
    for c in COLUMNS:
        fields.append(pa.field(c, pa.int64() if c in ("label", "seed") else pa.string()))
    features = hf_features(class_names)
    ordered = {f.name: features[f.name] for f in fields}
    meta = {b"huggingface": json.dumps({"info": {"features": ordered}}).encode()}
    return pa.schema(fields, metadata=meta)


def temp_path(path: Path) -> Path:
    """``.<name>.<pid>.rltmp`` beside ``path``: hidden, so neither ``load_dataset`` nor a
    shard glob takes a half-written shard; renamed over ``path`` when complete."""
    return path.with_name(temp_name(path.name))


class _Shard:
    """A shard written to its temp file and renamed into place by :meth:`close`."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.tmp = temp_path(self.path)
        self.rows = 0

    def _finish(self) -> int:
        with environment_errors(f"cannot write {self.path}"):
            fsync_path(self.tmp)  # complete on disk before its name says so
            os.replace(self.tmp, self.path)
            return self.path.stat().st_size

    def abort(self) -> None:
        try:
            self.tmp.unlink()
        except OSError:
            pass


class ParquetShard(_Shard):
    """One Parquet shard of a Hugging Face dataset, written a row group at a time.

    The image bytes are stored uncompressed (they are JPEG or PNG already: compressing
    them again costs time and saves nothing); the metadata columns are dictionary-encoded
    and zstd-compressed.
    """

    def __init__(self, path: Path, class_names: Sequence[str] | None):
        import pyarrow.parquet as pq

        super().__init__(path)
        self.schema = parquet_schema(class_names)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        compression = {c: "zstd" for c in COLUMNS} | {"image.bytes": "none", "image.path": "zstd"}
        with environment_errors(f"cannot write {self.tmp}"):
            self.writer = pq.ParquetWriter(
                self.tmp, self.schema, compression=compression, write_statistics=False
            )
        self.pending: dict[str, list] = {c: [] for c in ("bytes", "path", *COLUMNS)}

    def add(self, row: Row, data: bytes) -> None:
        self.pending["bytes"].append(data)
        self.pending["path"].append(row.path)
        for c, v in row.columns().items():
            self.pending[c].append(v)
        self.rows += 1
        if len(self.pending["bytes"]) >= ROW_GROUP:
            self._flush()

    def _flush(self) -> None:
        """One row group, built column by column (no Python dict per row)."""
        import pyarrow as pa

        got = self.pending
        if not got["bytes"]:
            return
        image = pa.StructArray.from_arrays(
            [pa.array(got["bytes"], pa.binary()), pa.array(got["path"], pa.string())],
            fields=list(self.schema.field("image").type),
        )
        arrays = [image] + [pa.array(got[c], self.schema.field(c).type) for c in COLUMNS]
        table = pa.Table.from_arrays(arrays, schema=self.schema)
        with environment_errors(f"cannot write {self.tmp}"):
            self.writer.write_table(table, row_group_size=ROW_GROUP)
        self.pending = {c: [] for c in got}

    def close(self) -> int:
        """Write what is pending, close, and move the shard into place; its size."""
        self._flush()
        with environment_errors(f"cannot write {self.tmp}"):
            self.writer.close()
        return self._finish()

    def abort(self) -> None:
        try:
            self.writer.close()
        except Exception:  # noqa: BLE001 - the temp file is removed anyway
            pass
        super().abort()


def tar_header(name: str, size: int) -> bytes:
    """The 512-byte header ``tarfile`` (PAX format) writes for a regular file ``name`` of
    ``size`` bytes, mode 0644, owner 0, time 0, built directly: ``TarInfo.tobuf`` costs
    more than copying a 20 KB image. For an ASCII name under 100 bytes (every shard key:
    ``00000012.jpg``), where tarfile needs no extended header; others go through it."""
    raw = name.encode("ascii", "replace")
    if len(raw) >= 100 or not name.isascii() or size >= 8**11:
        info = tarfile.TarInfo(name)
        info.size, info.mode, info.mtime = size, 0o644, 0
        return info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")
    head = b"".join(
        [
            raw.ljust(100, b"\0"),
            b"0000644\0",  # mode
            b"0000000\0" * 2,  # uid, gid
            b"%011o\0" % size,
            b"00000000000\0",  # mtime
            b" " * 8,  # the checksum, counted as spaces
            tarfile.REGTYPE,
            b"\0" * 100,  # linkname
            tarfile.POSIX_MAGIC,
            b"\0" * 64,  # uname, gname; devmajor, devminor left empty (not a device)
        ]
    ).ljust(tarfile.BLOCKSIZE, b"\0")
    return head[:148] + b"%06o\0" % sum(head) + head[155:]


class TarShard(_Shard):
    """One WebDataset shard: a plain tar of ``<key>.<ext>`` image and ``<key>.json``
    metadata members, with fixed owners and times so the same rows give the same bytes
    (the bytes ``tarfile`` writes for them, written directly: :func:`tar_header`)."""

    def __init__(self, path: Path):
        super().__init__(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with environment_errors(f"cannot write {self.tmp}"):
            self.fh = open(self.tmp, "wb")
        self.offset = 0

    def _member(self, name: str, blob: bytes) -> None:
        pad = -len(blob) % tarfile.BLOCKSIZE
        for part in (tar_header(name, len(blob)), blob, b"\0" * pad):
            self.fh.write(part)
            self.offset += len(part)

    def add(self, key: str, row: Row, data: bytes) -> None:
        meta = to_json(row.values()).encode()
        with environment_errors(f"cannot write {self.tmp}"):
            self._member(f"{key}.{image_ext(data, row.path)}", data)
            self._member(f"{key}.json", meta)
        self.rows += 1

    def close(self) -> int:
        """Two zero blocks, padding to tarfile's record size, and the rename."""
        end = self.offset + 2 * tarfile.BLOCKSIZE
        with environment_errors(f"cannot write {self.tmp}"):
            self.fh.write(b"\0" * (2 * tarfile.BLOCKSIZE + -end % tarfile.RECORDSIZE))
            self.fh.close()
        return self._finish()

    def abort(self) -> None:
        try:
            self.fh.close()
        except OSError:
            pass
        super().abort()


def remove_stale_temps(out: Path) -> int:
    """Delete the temp shards a killed export left (``.<name>.<pid>.rltmp`` of a process
    that no longer runs) in ``out`` and its ``data/`` folder."""
    n = 0
    for folder in (out, out / HF_DIR):
        if not folder.is_dir():
            continue
        for p in folder.iterdir():
            if not is_stale_temp(p.name):
                continue
            try:
                p.unlink()
                n += 1
            except OSError:
                pass
    return n


# --------------------------------------------------------------------------- reading
@dataclass
class ExportedSet:
    """An exported set as indexed (metadata only).

    Attributes:
        root: The folder.
        kind: ``hf`` (Parquet), ``arrow`` (``save_to_disk``) or ``webdataset``.
        shards: The shard files, relative to ``root``.
        rows: Every row's metadata.
        where: Per row, ``(shard index, locator)``: a Parquet ``(row group, row)``, an
            Arrow ``(row,)``, a tar member's ``(offset, size)``.
        record: The export's ``robustlab-export.json`` (None: a dataset saved by
            ``datasets``, which keeps only the rows).
        skipped: ``(file, reason)`` for files of the folder that are no part of the set.
    """

    root: Path
    kind: str
    shards: list[str]
    rows: list[Row] = field(default_factory=list)
    where: list[tuple[int, tuple[int, ...]]] = field(default_factory=list)
    record: dict | None = None
    skipped: list[tuple[str, str]] = field(default_factory=list)


def _listing(root: Path) -> tuple[dict[str, list[str]], list[tuple[str, str]]]:
    from robustlab.files.safety import walk_files

    files, skipped = walk_files(root)
    by_suffix: dict[str, list[str]] = {}
    for f in files:
        by_suffix.setdefault(f.suffix.lower(), []).append(str(f))
    return by_suffix, [(str(a), b) for a, b in skipped]


def _candidates(root: Path) -> dict[str, str]:
    """The first shard of each kind where an export or a ``save_to_disk`` copy keeps them
    (the folder itself, ``data/``, a saved DatasetDict's split folders), listed without
    walking the folder: every ``evaluate`` asks, on folders of millions of images too."""
    folders = [root, root / HF_DIR]
    try:
        splits = json.loads((root / "dataset_dict.json").read_text(encoding="utf-8"))["splits"]
        folders += [root / str(s) for s in splits]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    kinds = {".parquet": "hf", ".arrow": "arrow", ".tar": "webdataset"}
    found: dict[str, str] = {}
    for folder in folders:
        first: dict[str, str] = {}  # the first name of each kind (no sort of every name)
        try:
            for e in os.scandir(folder):
                kind = kinds.get(os.path.splitext(e.name)[1])
                if kind and not e.name.startswith(".") and e.is_file():
                    first[kind] = min(first.get(kind, e.name), e.name)
        except OSError:
            continue
        for kind in ("hf", "arrow", "webdataset"):  # one order, whatever scandir's
            if kind in first:
                found.setdefault(kind, str((folder / first[kind]).relative_to(root)))
    return found


def detect(root: Path) -> str | None:
    """``hf``, ``arrow`` or ``webdataset`` when ``root`` holds an exported set (its shards
    carry robustlab's columns), else None. Reads one shard's schema or first member."""
    from robustlab.files.safety import file_inside

    root = Path(root)
    if not root.is_dir():
        return None
    for kind, rel in _candidates(root).items():
        path = file_inside(root, rel)  # the link rule: never a shard a link leads out to
        if path is not None and _is_robustlab_shard(path, kind):
            return kind
    return None


def _is_robustlab_shard(path: Path, kind: str) -> bool:
    try:
        if kind == "hf":
            import pyarrow.parquet as pq

            names = set(pq.read_schema(path).names)
        elif kind == "arrow":
            import pyarrow as pa

            with pa.memory_map(str(path)) as src:
                names = set(pa.ipc.open_stream(src).schema.names)
        else:
            # A sample's .json follows its image: the first members say it, and a large
            # tar of something else (a downloaded release beside the photos) is not read
            # through to its end.
            with tarfile.open(path) as tar:
                for _, member in zip(range(4), tar):
                    if member.name.endswith(".json"):
                        fh = tar.extractfile(member)
                        names = set(json.loads(fh.read()) if fh else {})
                        break
                else:
                    return False
    except Exception:  # noqa: BLE001 - any unreadable shard: not an exported set
        return False
    return {"image", *COLUMNS} <= names if kind != "webdataset" else set(COLUMNS) <= names


def open_export(root: Path) -> ExportedSet | None:
    """The index of the exported set in ``root``, or None when it holds none.

    Raises:
        InputError: a shard cannot be read, or a row's metadata is not robustlab's.
    """
    root = Path(root)
    kind = detect(root)
    if kind is None:
        return None
    by_suffix, skipped = _listing(root)
    suffix = {"hf": ".parquet", "arrow": ".arrow", "webdataset": ".tar"}[kind]
    shards = sorted(by_suffix.get(suffix) or [])
    ours = {suffix, ".md", ".json"}
    skipped += [
        (f, "not a shard of the exported set")
        for s, fs in by_suffix.items()
        if s not in ours
        for f in fs
    ]
    out = ExportedSet(root=root, kind=kind, shards=shards, skipped=skipped)
    read = {"hf": _index_parquet, "arrow": _index_arrow, "webdataset": _index_tar}[kind]
    for i, rel in enumerate(shards):
        try:
            read(out, i, root / rel)
        except (OSError, ValueError, tarfile.TarError) as exc:
            raise InputError(
                f"cannot read the exported shard {root / rel}: {exc}",
                hint="export again into a new --out",
            ) from None
    from robustlab.files.safety import named_file

    found = named_file(root, RECORD, what="the export's record")
    if found is not None:
        try:
            record = json.loads(found.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            record = None
        out.record = record if isinstance(record, dict) and record.get("format") == FORMAT else None
    return out


def _meta_rows(table) -> list[Row]:
    """The rows of a table's metadata columns, with each image's path (never its bytes)."""
    image = table.column("image")
    paths = [v for chunk in image.chunks for v in chunk.field("path").to_pylist()]
    cols = {c: table.column(c).to_pylist() for c in COLUMNS}
    return [row_from({c: cols[c][k] for c in COLUMNS}, paths[k]) for k in range(table.num_rows)]


def _index_parquet(out: ExportedSet, shard: int, path: Path) -> None:
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(path)
    for rg in range(pf.metadata.num_row_groups):
        table = pf.read_row_group(rg, columns=[*COLUMNS, "image.path"])
        rows = _meta_rows(table)
        out.rows += rows
        out.where += [(shard, (rg, k)) for k in range(len(rows))]


def _index_arrow(out: ExportedSet, shard: int, path: Path) -> None:
    import pyarrow as pa

    with pa.memory_map(str(path)) as src:
        table = pa.ipc.open_stream(src).read_all()
        rows = _meta_rows(table)
    out.rows += rows
    out.where += [(shard, (k,)) for k in range(len(rows))]


def _index_tar(out: ExportedSet, shard: int, path: Path) -> None:
    images: dict[str, tuple[int, int]] = {}
    metas: dict[str, dict] = {}
    with tarfile.open(path) as tar:
        for member in tar:
            if not member.isfile():
                continue
            # WebDataset's rule: the key ends at the first dot of the member's base name.
            folder, _, base = member.name.rpartition("/")
            stem, _, ext = base.partition(".")
            key = f"{folder}/{stem}" if folder else stem
            if ext == "json":
                fh = tar.extractfile(member)
                metas[key] = json.loads(fh.read()) if fh else {}
            else:
                images[key] = (member.offset_data, member.size)
    for key in sorted(metas):
        if key not in images:
            out.skipped.append((f"{path.name}:{key}", "a metadata file without its image"))
            continue
        out.rows.append(row_from(metas[key]))
        out.where.append((shard, images[key]))


class ShardReader:
    """Reads one exported image's bytes by its locator; picklable (the runner's workers
    get a copy), opening shards lazily and keeping the last Parquet row group and the
    memory-mapped Arrow tables of this process."""

    def __init__(self, root: Path, kind: str, shards: Sequence[str]):
        self.root = Path(root)
        self.kind = kind
        self.shards = list(shards)
        self._cache: dict[Any, Any] = {}

    def __getstate__(self):
        return {**self.__dict__, "_cache": {}}

    def read(self, shard: int, where: tuple[int, ...]) -> bytes:
        path = self.root / self.shards[shard]
        if self.kind == "webdataset":
            offset, size = where
            with open(path, "rb") as fh:
                fh.seek(offset)
                data = fh.read(size)
            if len(data) != size:
                raise OSError(f"{path} ends inside an image (truncated shard)")
            return data
        if self.kind == "hf":
            rg, k = where
            key = (shard, rg)
            if key not in self._cache:
                import pyarrow.parquet as pq

                self._cache.clear()  # one row group at a time
                self._cache[key] = pq.ParquetFile(path).read_row_group(rg, columns=["image"])
            return self._cache[key].column("image")[k]["bytes"].as_py()
        if shard not in self._cache:
            import pyarrow as pa

            # Memory-mapped: the table's buffers are the file's pages, read when touched.
            source = pa.memory_map(str(path))
            self._cache[shard] = pa.ipc.open_stream(source).read_all().column("image")
        return self._cache[shard][where[0]]["bytes"].as_py()


__all__ = [
    "COLUMNS",
    "FORMAT",
    "RECORD",
    "ExportedSet",
    "ParquetShard",
    "Row",
    "ShardReader",
    "TarShard",
    "detect",
    "open_export",
    "row_from",
]
