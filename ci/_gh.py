"""``gh`` answers as JSON, for the release checks (publish_check, release_status)."""

from __future__ import annotations

import json
import subprocess
from typing import Any

from ..core.errors import BuildError


class Unreadable(BuildError):
    """GitHub refused to show a setting to this job's token (HTTP 401/403)."""


def gh_json(*args: str) -> Any:
    """``gh`` output as JSON; None when GitHub answers 404 (the thing does not exist)."""
    result = subprocess.run(["gh", *args], capture_output=True, text=True, check=False)
    if result.returncode == 0:
        return json.loads(result.stdout or "null")
    text = result.stderr + result.stdout
    if "404" in text or "Not Found" in text or "release not found" in text:
        return None
    if "403" in text or "401" in text:
        raise Unreadable(f"gh {' '.join(args)}: {text.strip()}")
    raise BuildError(f"gh {' '.join(args)} failed: {text.strip()}")
