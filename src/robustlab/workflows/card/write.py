"""The card's files, all from the same :class:`~.numbers.Number` rows: ``card.md``,
``card.json`` (RobustBench's model-info keys where they apply), ``model-index.yaml`` (the
Hugging Face model-card format) and one unaggregated CSV per (benchmark, shift, level)
under ``cells/``; each carries the provenance (model spec, weights hash, protocol, data
fingerprint, image count, robustlab version, run ids)."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pandas as pd

from robustlab.errors import environment_errors
from robustlab.files.atomic import atomic_write
from robustlab.workflows.card.numbers import Number
from robustlab.workflows.card.plan import TITLES

CSV_COLUMNS = ["sample_id", "label", "class_name", "top1_id", "correct", "correct5"]
# The benchmark -> model-index dataset name and type (no Hub dataset id exists for a card's
# own images: the type names the benchmark, the name says whose images).
_HF_TYPES = {
    "imagenet-c": "imagenet-c",
    "ximagenet12": "ximagenet-12",
    "imagenet9": "imagenet-9",
    "imagenet-e": "imagenet-e",
    "imagenet-d": "imagenet-d",
}


def fmt(x: float | None, unit: str) -> str:
    if x is None:
        return "n/a"
    return f"{x:.4f}" if unit == "score" else f"{x:.1f}"


def interval(n: Number) -> str:
    return "" if n.lo is None or n.hi is None else f"{fmt(n.lo, n.unit)}\u2013{fmt(n.hi, n.unit)}"


def _write(path: Path, text: str) -> None:
    with environment_errors(f"cannot write {path}"):
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, text.encode())


def write_cells(store, out: Path, prov: dict[str, dict]) -> list[str]:
    """``cells/<benchmark>/<shift>/<level>.csv``: one row per image of that cell, with the
    run's provenance (``prov[benchmark]``, its ``run_id`` first) in every row. Returns the
    paths written, relative to ``out``."""
    written = []
    for bench, run in prov.items():
        rows = store.predictions(
            [run["run_id"]],
            columns=[
                "sample_id",
                "shift",
                "level",
                "label",
                "class_name",
                "top5_ids",
                "correct",
                "correct5",
            ],
        )
        if bench == "imagenet-d":  # one folder of clean images: its subsets are the cells
            rows = rows.assign(shift=rows["sample_id"].astype(str).str.split("/").str[0])
        rows = rows.assign(top1_id=[int(t[0]) if len(t) else -1 for t in rows["top5_ids"]])
        for (shift, level), g in rows.groupby(["shift", "level"], sort=True):
            part = g.sort_values("sample_id")[CSV_COLUMNS].copy()
            for k, v in run.items():
                part[k] = v
            rel = Path("cells") / bench / str(shift) / f"{level}.csv"
            _write(out / rel, part.to_csv(index=False))
            written.append(rel.as_posix())
    return written


def card_json(card: dict) -> str:
    """RobustBench's model-info keys where they apply (ImageNet-C: percent strings, as in
    its ``model_info`` files; ``corruptions_mce`` only against AlexNet), then robustlab's
    own record of everything."""
    nums = {(n["benchmark"], n["metric"]): n for n in card["numbers"]}

    def pct(key):
        n = nums.get(("imagenet-c", key))
        return None if n is None or n["value"] is None else f"{n['value']:.2f}"

    head: dict = {
        "name": card["model"],
        "link": "",
        "authors": "",
        "additional_data": None,
        "number_forward_passes": 1,
        "dataset": "imagenet",
        "venue": "",
        "architecture": card["model"],
        "eps": None,
        "clean_acc": pct("clean_acc"),
        "corruptions_acc": pct("corruptions_acc"),
    }
    if pct("mce") is not None:
        head["corruptions_mce"] = pct("mce")
    head["footnote"] = card["footnote"]
    head["robustlab"] = card
    return json.dumps(head, indent=1, default=str) + "\n"


def model_index(card: dict) -> str:
    """``model-index`` (Hugging Face model-card metadata): one result per benchmark with
    its headline numbers; provenance in the dataset's ``revision`` (data fingerprint) and
    ``args``, and in the comment lines above."""
    import yaml

    results = []
    for bench in card["benchmarks"]:
        heads = [
            n
            for n in card["numbers"]
            if n["benchmark"] == bench and n["headline"] and n["value"] is not None
        ]
        if not heads:
            continue
        p = card["provenance"][bench]
        results.append(
            {
                "task": {"type": "image-classification", "name": "Image Classification"},
                "dataset": {
                    "name": f"{TITLES[bench]} (robustlab, {p['images']} images)",
                    "type": _HF_TYPES[bench],
                    "config": p["suite"] or "imagenet-d",
                    "split": "validation",
                    "revision": p["data_fingerprint"],
                    "args": {
                        "images": p["images"],
                        "seed": p["seed"],
                        "protocol": p["protocol"],
                        "run_id": p["run_id"],
                    },
                },
                "metrics": [
                    {
                        "type": n["metric"],
                        "value": round(float(n["value"]), 4),
                        "name": f"{n['label']} ({n['unit']}; 95 % CI {interval(Number(**n))}, "
                        f"{n['n_images']} images)",
                    }
                    for n in heads
                ],
            }
        )
    head = [
        f"# robustlab {card['version']} card of {card['model']} (weights {card['weights_hash']})",
        f"# {card['footnote']}",
        "# paste under `model-index:` of a model card's YAML header",
    ]
    body = yaml.safe_dump(
        {"model-index": [{"name": card["model"], "results": results}]},
        sort_keys=False,
        allow_unicode=True,
        width=1000,
    )
    return "\n".join(head) + "\n" + body


def _table(rows: list[list[str]], header: list[str]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out


def _number_row(n) -> list[str]:
    """A number's cells in the card's tables: benchmark, metric, value, interval, images."""
    return [
        TITLES[n.benchmark],
        n.label,
        f"{fmt(n.value, n.unit)} {n.unit}",
        interval(n),
        str(n.n_images),
    ]


def card_md(card: dict, reference: pd.DataFrame) -> str:
    """The card as Markdown: headline rows, published rows beside them, what was skipped,
    the details and the provenance."""
    numbers = [Number(**n) for n in card["numbers"]]
    lines = [f"# Robustness card: {card['model']}", "", card["footnote"], ""]
    rows = [[*_number_row(n), n.note] for n in numbers if n.headline]
    lines += ["## Headline", ""]
    lines += _table(rows, ["benchmark", "metric", "value", "95 % CI", "images", "note"])
    lines += ["", "## Published numbers beside yours", ""]
    lines += [
        "Each published row says what it was measured on; yours is shown with its interval "
        "and image count, and is comparable only when it was measured on the same images.",
        "",
    ]
    lines += _table(*reference_rows(numbers, reference))
    if any(n.benchmark == "imagenet-c" for n in numbers):
        lines += ["", "### ImageNet-C per corruption", ""]
        lines += _table(*corruption_rows(numbers, reference))
    if card["skipped"] or card["left_out"]:
        lines += ["", "## Skipped", ""]
        lines += [f"- {TITLES[b]}: {why}" for b, why in card["skipped"].items()]
        lines += [
            f"- {TITLES[b]} left out {note}"
            for b, notes in card["left_out"].items()
            for note in notes
        ]
    lines += ["", "## Details", ""]
    rows = [_number_row(n) for n in numbers if not n.headline]
    lines += _table(rows, ["benchmark", "metric", "value", "95 % CI", "images"])
    lines += ["", "## Provenance", ""]
    rows = [
        [
            TITLES[b],
            p["run_id"],
            p["model_spec"],
            p["weights_hash"],
            str(p["protocol"]),
            p["data_fingerprint"],
            str(p["images"]),
            str(p["seed"]),
        ]
        for b, p in card["provenance"].items()
    ]
    lines += _table(
        rows,
        [
            "benchmark",
            "run id",
            "model",
            "weights hash",
            "protocol",
            "data fingerprint",
            "images",
            "seed",
        ],
    )
    lines += [
        "",
        f"robustlab {card['version']}; per-image rows: `cells/<benchmark>/<shift>/<level>.csv`; "
        f"intervals: {card['n_resamples']} bootstrap resamples over images (seed "
        f"{card['bootstrap_seed']}).",
        "",
    ]
    return "\n".join(lines)


# A published metric the card measures only in part, and the card's key for that part.
_PARTIAL = {
    ("ximagenet12", "robustness_score"): ("robustness_score_ex1", "EX1 part (S_robust is below)"),
    # the reference's random_bg adds the object onto the donor (addWeighted): level "add"
    ("ximagenet12", "acc:random_bg"): ("acc:random_bg/add", "level add"),
}
_PER_CORRUPTION = ("ce:", "relative_ce:", "error:")


def _yours(n: Number | None, ran: bool, tail: str = "") -> str:
    if n is None or n.value is None:
        return "not measured here (see the headline note)" if ran else "benchmark skipped"
    head = f"{tail}: " if tail else ""
    return f"{head}{fmt(n.value, n.unit)} (95 % CI {interval(n)}, {n.n_images} images)"


def reference_rows(
    numbers: list[Number], reference: pd.DataFrame
) -> tuple[list[list[str]], list[str]]:
    """(rows, header) of the published rows of the card's benchmarks but the
    per-corruption ones (:func:`corruption_rows`), each beside the card's own number of
    that metric: with its interval and image count, never alone."""
    mine = {(n.benchmark, n.metric): n for n in numbers}
    ran = {n.benchmark for n in numbers}
    rows = []
    for r in reference.itertuples(index=False):
        if str(r.metric).startswith(_PER_CORRUPTION):
            continue
        key, tail = _PARTIAL.get((r.benchmark, r.metric), (r.metric, ""))
        rows.append(
            [
                TITLES.get(r.benchmark, r.benchmark),
                r.model,
                r.metric,
                f"{r.value:g}",
                _yours(mine.get((r.benchmark, key)), r.benchmark in ran, tail),
                r.measured_on,
                r.source,
            ]
        )
    return rows, ["benchmark", "model", "metric", "published", "yours", "measured on", "source"]


def corruption_rows(
    numbers: list[Number], reference: pd.DataFrame
) -> tuple[list[list[str]], list[str]]:
    """ImageNet-C per corruption: AlexNet's error and ResNet-50's CE and relative CE as
    published, beside the card's mean error and CE: AlexNet's when the run covers what
    AlexNet was measured on, else the CE against the baseline run on the same images,
    named in the cell (never a bare number beside the AlexNet-normalised column)."""
    from robustlab.shifts.corruptions import list_corruptions

    mine = {n.metric: n for n in numbers if n.benchmark == "imagenet-c"}
    ref = {
        (r.model, r.metric): f"{r.value:g}"
        for r in reference.itertuples(index=False)
        if r.benchmark == "imagenet-c"
    }
    rows = []
    for c in list_corruptions("common"):
        err, ce = mine.get(f"error:{c}"), mine.get(f"ce:{c}")
        against = mine.get(f"ce_vs_baseline:{c}")
        if ce is not None:
            ce_cell = _yours(ce, True)
        elif against is not None:  # its label is "<corruption>: CE vs <baseline>"
            ce_cell = _yours(against, True, against.label.partition(": CE ")[2])
        else:
            ce_cell = ""
        rows.append(
            [
                c,
                ref.get(("AlexNet", f"error:{c}"), ""),
                ref.get(("ResNet-50", f"ce:{c}"), ""),
                ref.get(("ResNet-50", f"relative_ce:{c}"), ""),
                "" if err is None else _yours(err, True),
                ce_cell,
            ]
        )
    header = [
        "corruption",
        "AlexNet error % (published)",
        "ResNet-50 CE % (published)",
        "ResNet-50 rel. CE % (published)",
        "yours: mean error %",
        "yours: CE %",
    ]
    return rows, header


def write_all(out: Path, card: dict, reference: pd.DataFrame) -> dict[str, Path]:
    """card.md, card.json and model-index.yaml into ``out``."""
    files = {
        "card.md": card_md(card, reference),
        "card.json": card_json(card),
        "model-index.yaml": model_index(card),
    }
    for name, text in files.items():
        _write(out / name, text)
    return {name: out / name for name in files}


def number_dicts(numbers: list[Number]) -> list[dict]:
    return [asdict(n) for n in numbers]
