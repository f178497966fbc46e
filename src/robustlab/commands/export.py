"""``robustlab export --data DIR --format hf|webdataset --out DIR``: publish a folder
robustlab wrote as a Hugging Face dataset or WebDataset shards."""

from __future__ import annotations

from robustlab.commands._args import add_into_existing, add_labels, add_no_progress, count
from robustlab.errors import InputError

UNITS = {
    "": 1,
    "B": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "KIB": 2**10,
    "MIB": 2**20,
    "GIB": 2**30,
}


def size(text: str) -> int:
    """A shard size: bytes, or a number with KB/MB/GB (powers of 10) or KiB/MiB/GiB."""
    import re

    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*", text)
    unit = m.group(2).upper() if m else ""
    if m is None or unit not in UNITS or float(m.group(1)) * UNITS[unit] < 1:
        raise InputError(
            f"--shard-size {text!r} is not a size", hint="e.g. --shard-size 500MB (or 2GB, 65536)"
        )
    return int(float(m.group(1)) * UNITS[unit])


def add_parser(sub) -> None:
    p = sub.add_parser(
        "export",
        help="write a generated, synthesised or mined folder as a Hugging Face dataset or "
        "WebDataset shards",
        description="Export a folder written by robustlab generate (any suite), synth or mine "
        "as Parquet shards with a dataset card (load_dataset(DIR)) or WebDataset tar shards, "
        "one row per image with its label, source id, cell, seed, parameters and attributes. "
        "The stored bytes go in as they are (checked against the recorded hashes); shards "
        "are written atomically and a rerun resumes. `robustlab evaluate MODEL --data OUT` "
        "reads the result back with the same cells and numbers.",
    )
    p.add_argument("--data", required=True, help="the generate, synth or mine output to export")
    p.add_argument(
        "--format",
        required=True,
        choices=["hf", "webdataset"],
        help="hf: Hugging Face dataset (data/test-*.parquet + README.md); webdataset: "
        "test-*.tar with a .json per image",
    )
    p.add_argument("--out", required=True, help="folder for the shards (resumes a killed export)")
    p.add_argument(
        "--shard-size",
        type=size,
        default="512MiB",
        help="largest shard, by the size of its image files (default 512MiB)",
    )
    p.add_argument(
        "--shard-images",
        type=count,
        default=None,
        help="most images per shard (default: no limit)",
    )
    add_labels(p)
    add_into_existing(p)
    add_no_progress(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from robustlab.workflows.export import export

    res = export(
        args.data,
        args.out,
        format=args.format,
        shard_size=args.shard_size,
        shard_images=args.shard_images,
        labels=args.labels_csv,
        progress=not args.no_progress,
    )
    resumed = f", {res.resumed} already in place" if res.resumed else ""
    print(
        f"{res.out}: {res.rows} images in {res.shards} {res.format} shard(s) ({res.written} "
        f"written{resumed}; {len(res.skipped)} cell(s) without an image, reasons in "
        f"robustlab-export.json; {res.seconds:.1f} s); export {res.export_id}"
    )
    return 0
