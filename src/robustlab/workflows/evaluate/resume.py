"""Checks against the runs a database already holds, before a run writes: a resume with
another configured tool is refused, an earlier run over the same folder with other
inputs is named.
"""

from __future__ import annotations

import logging

from robustlab.errors import InputChangedError
from robustlab.store import Store

log = logging.getLogger(__name__)


def note_earlier_runs(store: Store, record) -> str | None:
    """Say, in one warning line, when this is a new run although an earlier run of the same
    model and suite over the same data folder exists with other inputs, and which differ.

    Why not refuse: both runs are valid measurements of different inputs, kept apart under
    their own run ids; what must never happen is the user reading the old numbers as the new
    ones, so the line names both run ids and the differences. Returns the line (or None).
    """
    from robustlab.records.identity import input_changes

    new = record.config.get("inputs")
    if not new or not store.exists() or store.get_run(record.run_id) is not None:
        return None
    runs = store.runs()
    if runs.empty:
        return None
    same = runs[
        (runs["data_root"] == record.data_root)
        & (runs["model_spec"] == record.model_spec)
        & (runs["weights_hash"].fillna("") == (record.weights_hash or ""))
        & (runs["suite"].fillna("") == (record.suite or ""))
        & (runs["run_id"] != record.run_id)
    ]
    for _, old in same.sort_values("started_at", ascending=False).iterrows():
        config = old["config"] if isinstance(old["config"], dict) else {}
        old_inputs = config.get("inputs")
        if not old_inputs:
            continue
        changes = input_changes(old_inputs, new)
        for key, label in (("label_space", "label space"), ("suite_version", "suite version")):
            if old.get(key) != getattr(record, key):
                changes.append(f"{label} {old.get(key)} -> {getattr(record, key)}")
        versions = old["versions"] if isinstance(old["versions"], dict) else {}
        before = versions.get("robustlab")
        if before != record.versions.get("robustlab"):
            changes.append(f"robustlab {before} -> {record.versions.get('robustlab')}")
        if not changes:  # e.g. a fine-tuning split: not what this line is about
            continue
        line = (
            f"new run {record.run_id}: earlier run {old['run_id']} of {record.model_spec} "
            f"over {record.data_root} had other inputs ({'; '.join(changes)}); "
            "its numbers are kept under its own id"
        )
        log.warning(line)
        return line
    return None


def check_same_resources(store: Store, record) -> None:
    """Refuse to resume a run whose images came from another configured tool.

    The tools (ai_bg's inpainter and bg_complexity's diffusion checkpoints, the attribute
    edits' hole-fill backend: every self-describing resource of the registry) are not part
    of the run id (a run may gain such cells later), so without this check a rerun with a
    different ``--inpainter``, ``--bg-diffusion`` or ``--edit-fill`` (or their
    ``ROBUSTLAB_*`` variables) would mix two tools' images in one run.
    """
    from robustlab.shifts.registry import described_resources, get_resource, list_shifts

    if not store.exists():
        return
    old_config = None
    for key in described_resources():
        new = record.config.get(key) or {}
        if not new.get("fingerprint"):
            continue
        if old_config is None:
            old_config = (store.get_run(record.run_id) or {}).get("config") or {}
        old = old_config.get(key) or {}
        if old.get("fingerprint") and old["fingerprint"] != new["fingerprint"]:
            res = get_resource(key)
            shifts = "/".join(s.name for s in list_shifts() if res.uses(s))
            raise InputChangedError(
                f"run {record.run_id} already holds {shifts} images drawn by the {res.noun} "
                f"{res.label(old)} (fingerprint {old['fingerprint']}); the configured one is "
                f"{res.label(new)} ({new['fingerprint']})",
                hint=f"use another --db or --seed, or give the run's {res.noun} again",
            )
