"""What every diffusers-backed loader shares: quiet loading (imports diffusers only when used)."""

from __future__ import annotations

import contextlib


@contextlib.contextmanager
def quiet_loading():
    """No per-component loading chatter or progress bars from diffusers and transformers on
    a user's terminal while a checkpoint loads or saves ("Loading pipeline components",
    "Loading weights", "Writing model shards")."""
    from diffusers.utils import logging as dlog

    try:
        from transformers.utils import logging as tlog
    except ImportError:  # diffusers alone (a UNet folder)
        tlog = None
    state = [(m, m.get_verbosity(), m.is_progress_bar_enabled()) for m in (dlog, tlog) if m]
    for m, _, _ in state:
        m.set_verbosity_error()
        m.disable_progress_bar()
    try:
        yield
    finally:
        for m, verbosity, bars in state:
            m.set_verbosity(verbosity)
            if bars:
                m.enable_progress_bar()


DTYPES = ("float32", "float16", "bfloat16")


def pipeline_dtype(device: str, dtype: str | None, what: str) -> str:
    """The checked compute dtype of a pipeline: float16 on a GPU, float32 on the CPU (whose
    half-precision kernels are slow or missing), unless the user named one."""
    from robustlab.errors import InputError

    dtype = dtype or ("float16" if device.startswith("cuda") else "float32")
    if dtype not in DTYPES:
        raise InputError(f"{what} dtype must be float32, float16 or bfloat16, not {dtype!r}")
    return dtype


def load_auto_pipeline(kind: str, path, dtype: str, what: str):
    """``diffusers.<kind>.from_pretrained(path)`` in ``dtype``, from local files only and
    quietly. Any failure (no diffusers, the wrong pipeline type, a missing component, a
    corrupt file) is the user's checkpoint or setup: one line naming ``what`` and the path."""
    from robustlab.errors import InputError

    try:
        import warnings

        import diffusers
        import torch

        with warnings.catch_warnings(), quiet_loading():  # torch_dtype is now dtype
            warnings.filterwarnings("ignore", message=".*torch_dtype.*", category=FutureWarning)
            return getattr(diffusers, kind).from_pretrained(
                str(path), torch_dtype=getattr(torch, dtype), local_files_only=True
            )
    except Exception as exc:  # wrong pipeline type, missing component, corrupt file
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(f"cannot load {what} from {path}: {first}") from None
