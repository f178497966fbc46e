"""Argument types shared by several subcommands."""

from __future__ import annotations

import argparse


def workers(text: str) -> int:
    """``--workers``: a count of processes, 0 or more (what 0 means is the command's:
    ``generate`` uses every CPU, ``evaluate`` and ``train`` work in the main process)."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {n}")
    return n
