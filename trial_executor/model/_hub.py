"""A hub id: whether ``from_pretrained`` can read its config, from the local HF cache or from a reachable hub.

The cache is looked up through huggingface_hub (the cache transformers reads) without importing
transformers, which imports torch (seconds): a mistyped name found nowhere on this machine is
answered at once. transformers reads the config only where one is there to read.
"""

from __future__ import annotations

import os
import socket
from urllib.parse import urlparse


def hub_config_unavailable(name: str) -> str | None:
    """Why hub id ``name``'s config cannot be read (``"HF_HUB_OFFLINE is set"`` or ``"TRANSFORMERS_OFFLINE is set"``,
    ``"the hub cannot be reached"``, ``"it is not on the hub"``); ``None`` when it can, from the local HF cache or the hub."""
    from huggingface_hub import is_offline_mode  # what transformers obeys: HF_HUB_OFFLINE, else TRANSFORMERS_OFFLINE

    if _config_in_hub_cache(name) and _config_reads(name, local_files_only=True):
        return None
    if is_offline_mode():
        return f"{'HF_HUB_OFFLINE' if os.environ.get('HF_HUB_OFFLINE') else 'TRANSFORMERS_OFFLINE'} is set"
    if not _hub_reachable():
        return "the hub cannot be reached"
    return None if _config_reads(name) else "it is not on the hub"


def _config_reads(name: str, **options: bool) -> bool:
    from transformers import AutoConfig

    try:
        AutoConfig.from_pretrained(name, **options)
    except (OSError, ValueError):
        return False
    return True


def _config_in_hub_cache(name: str) -> bool:
    from huggingface_hub import try_to_load_from_cache

    try:
        return isinstance(try_to_load_from_cache(name, "config.json"), str)
    except ValueError:  # not a repo id at all (HFValidationError): transformers would refuse it too
        return False


def _hub_reachable(timeout: float = 3.0) -> bool:
    # One quick connection instead of the hub client's retries (tens of seconds) when offline.
    endpoint = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    port = endpoint.port or (443 if endpoint.scheme == "https" else 80)
    try:
        socket.create_connection((endpoint.hostname or "huggingface.co", port), timeout=timeout).close()
    except OSError:
        return False
    return True
