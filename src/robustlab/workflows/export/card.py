"""The dataset card (``README.md``) of an export: the Hub's YAML header (licence, task,
tags), how to load it, what each column means, where the set came
from (the folder's manifest: robustlab and library versions, suite, protocol, seed, cell
parameters, tools' fingerprints) and a licence section left to the user, who alone knows
the source photos' terms."""

from __future__ import annotations

import json
from pathlib import Path

from robustlab.workflows.export.plan import ExportPlan

COLUMN_TEXT = {
    "image": "the image file's bytes as robustlab stored them (never re-encoded), and its "
    "path in the folder it came from",
    "label": "class index in the label space (-1: none)",
    "class_name": "class folder name (an ImageNet wnid, an ImageNet-D class)",
    "source_id": "the source image's id (path in its source folder): rows with the same id "
    "are one photo's clean image and cells",
    "shift": "the shift (`clean`: the source photo as it is)",
    "level": "the shift's level (severity, object rate, angle...)",
    "seed": "the folder's seed (each cell's own is derived from it, the sample id, shift and level)",
    "suite": "the suite the folder was generated for",
    "label_space": "the label space of `label`",
    "params": "the shift's recorded parameters at this level (JSON)",
    "attributes": "what the edit achieved (ImageNet-E's attributes.csv row) or a synthesised "
    "image's prompt (JSON)",
    "review": "the human review's verdict, where the set was reviewed (JSON)",
    "content_hash": "BLAKE2b-128 of the image bytes (checked by robustlab as it reads them)",
    "robustlab": "how `robustlab evaluate` reads the row back: read rule and protocol (JSON)",
}


def write_card(out: Path, plan: ExportPlan, record: dict) -> None:
    """Write ``out/README.md`` atomically."""
    from robustlab.errors import environment_errors
    from robustlab.files.atomic import atomic_write

    with environment_errors(f"cannot write {out / 'README.md'}"):
        atomic_write(out / "README.md", card_text(plan, record).encode())


def card_text(plan: ExportPlan, record: dict) -> str:
    import yaml

    fmt = record["shard_format"]
    header: dict = {
        "license": "other",
        "license_name": "source-photos",
        "pretty_name": _title(plan),
        "task_categories": ["image-classification"],
        "tags": ["robustness", "robustlab", *([plan.suite] if plan.suite else [])],
    }
    # No `configs` entry: `data/test-*-of-*.parquet` is the Hub's own layout, found by
    # load_dataset(DIR) as the test split. A `configs` entry would make datasets (5.2) key
    # its cache on the folder's name and that entry alone, so a second export in a folder
    # of the same name would load the first one's rows from the cache.
    shards = record.get("shards") or []
    lines = [
        "---",
        yaml.safe_dump(header, sort_keys=False).rstrip(),
        "---",
        f"# {_title(plan)}",
        "",
        f"Written by `robustlab export` from `{plan.root.name}/` (a `robustlab "
        f"{plan.provenance.get('command')}` folder): {record.get('rows')} images in "
        f"{len(shards)} shard(s), one row per image, each image's bytes exactly as robustlab "
        "stored them.",
        "",
        "## Load",
        "",
        "```python",
        *_load_lines(fmt),
        "```",
        "",
        "`robustlab evaluate MODEL --data THIS_FOLDER` scores it with the same cells and "
        "numbers as the folder it came from (a copy saved with `save_to_disk` too).",
        "",
        "## Columns",
        "",
        *[f"- `{c}`: {text}" for c, text in COLUMN_TEXT.items()],
        "",
        "## Provenance",
        "",
        f"Label space `{plan.label_space.name}`, suite `{plan.suite}`, seed {plan.seed}; "
        f"the robustlab export record is `robustlab-export.json` (export "
        f"`{record.get('export_id')}`).",
        "",
        "```json",
        json.dumps(plan.provenance, indent=1, default=str),
        "```",
        "",
    ]
    skipped = record.get("skipped") or []
    if skipped:
        lines += [
            f"{len(skipped)} cell(s) have no image; each one's reason is in "
            "`robustlab-export.json` (`skipped`).",
            "",
        ]
    lines += [
        "## Licence",
        "",
        "The images are made from source photos whose licence robustlab cannot know: state "
        "it here (and in the `license` field above) before you publish this set. Sets "
        "made from ImageNet photos are bound by ImageNet's terms of access.",
        "",
    ]
    return "\n".join(lines)


def _title(plan: ExportPlan) -> str:
    what = plan.suite or ("ImageNet-D" if plan.origin == "synth" else plan.origin)
    return f"{what} ({plan.origin} by robustlab)"


def _load_lines(fmt: str) -> list[str]:
    if fmt == "hf":
        return [
            "from datasets import load_dataset",
            'ds = load_dataset("THIS_FOLDER", split="test")',
            '# or: load_dataset("parquet", data_files="THIS_FOLDER/data/*.parquet")',
        ]
    return [
        "import webdataset as wds",
        'ds = wds.WebDataset("THIS_FOLDER/test-{000000..NNNNNN}.tar").decode("pil")',
        'for sample in ds: image, meta = sample.get("jpg") or sample.get("png"), sample["json"]',
    ]


__all__ = ["card_text", "write_card"]
