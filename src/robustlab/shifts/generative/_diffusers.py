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
