"""A bank's address as one spelling, so that one organization makes one lane.

Standard library only: the lane workflow (Temporal's sandbox) and the submit (before
temporalio is imported) both use it.
"""

from __future__ import annotations

from urllib.parse import urlsplit

__all__ = ["normalized_base_url"]


def normalized_base_url(base_url: str) -> str:
    """A bank's address as one spelling: scheme and host in lower case, no default port,
    no trailing slash."""
    parts = urlsplit(base_url.strip())
    scheme, host = parts.scheme.lower(), (parts.hostname or "").lower()
    default = {"http": 80, "https": 443}.get(scheme)
    port = "" if parts.port is None or parts.port == default else f":{parts.port}"
    if ":" in host:
        host = f"[{host}]"
    return f"{scheme}://{host}{port}{parts.path.rstrip('/')}"
