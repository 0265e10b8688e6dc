"""GPU families, as intelmac-torch names them in compat.json and known_failures.yaml.

Part of the intelmac-torch patch series (0003): ``python -m torch.backends.mps --check``
reports the family of the device it checks, and the project's regression suite loads this
file from the series' sources for its own reports, so both name a GPU the same way.

Intel: Skylake/Kaby Lake/Coffee Lake (HD 5xx/6xx, UHD 6xx, Iris 540/550, Iris Plus 6xx) are
Gen9; Ice Lake's "Iris Plus Graphics" (MacBook Air 2020, 13" MacBook Pro 2020, no model
number in its Metal name) is Gen11. AMD: Polaris/Vega/FirePro are GCN, Navi 1x RDNA1,
Navi 2x RDNA2.
"""

from __future__ import annotations

import re
from typing import Tuple

_FAMILY_PATTERNS: Tuple[Tuple[str, str], ...] = (
    ("apple-virtual", r"paravirtual"),
    ("apple", r"^apple\b|\bapple m\d"),
    ("nvidia", r"nvidia|geforce|quadro|tesla|\bh100\b|\bh200\b"),
    ("intel-gen11", r"iris\s*(\(tm\))?\s*plus graphics\s*(g[47])?\s*$|ice\s*lake"),
    (
        "intel-gen9",
        r"uhd graphics 6[0-9]{2}\b|hd graphics [56][0-9]{2}\b|iris\s*(\(tm\))?\s*(plus\s*)?graphics [56][0-9]{2}\b",
    ),
    ("intel-other", r"intel"),
    ("amd-rdna2", r"\b(rx|w)\s*6[0-9]{3}|radeon pro w6[0-9]{3}"),
    ("amd-rdna1", r"\b5[3-7]00\s*m\b|radeon pro 5[3-7]00\b|5700\s*xt|\b(rx|w)\s*5[0-9]{3}"),
    (
        "amd-gcn",
        r"vega|firepro|\brx\s*(4[6-9]0|5[5-9]0)\b|radeon pro [45][0-9]{2}x?\b|r9 m[0-9]{3}",
    ),
    ("amd-other", r"\bamd\b|radeon"),
)


def family_of(name: str, device_type: str) -> str:
    if device_type == "cpu":
        return "cpu"
    low = name.strip().lower()
    for family, pattern in _FAMILY_PATTERNS:
        if re.search(pattern, low):
            return family
    return "unknown"
