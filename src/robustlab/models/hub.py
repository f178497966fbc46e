"""Whether and where robustlab may download weights: the offline switches, the hub address
and a quick reachability probe.

Adapters ask these before a download so a machine without network fails with one line
naming the file to fetch, instead of a minute of retries inside the hub clients.
"""

from __future__ import annotations

import os
import socket
from urllib.parse import urlparse

# Environment switches that mean "never touch the network" (checked at call time, so a
# test or a user can set them after import).
OFFLINE_VARS = ("ROBUSTLAB_OFFLINE", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")


def offline() -> bool:
    """True when the user switched downloads off (``HF_HUB_OFFLINE=1`` and friends)."""
    return any(
        os.environ.get(v, "").strip().lower() not in ("", "0", "false", "no", "off")
        for v in OFFLINE_VARS
    )


def hub_endpoint() -> str:
    """The Hugging Face hub address timm and transformers download from."""
    return os.environ.get("HF_ENDPOINT", "https://huggingface.co")


def unreachable(url: str) -> str | None:
    """Why ``url``'s host cannot be reached at all (its name does not resolve), else None.

    A cheap check before a download: on a machine with no network the hub clients retry
    for about a minute, logging a warning each time, before they fail.
    """
    host = urlparse(url).hostname if "://" in url else url
    if not host:
        return None
    try:
        socket.getaddrinfo(host, 443)
    except OSError as exc:
        return f"{host} cannot be reached ({exc.strerror or exc})"
    return None
