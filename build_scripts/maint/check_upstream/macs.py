"""Pretend Macs: the Metal devices of real Intel, AMD and Apple machines."""

from __future__ import annotations

from typing import Any

GIB = 1024**3


def _device(
    name: str,
    registry_id: int,
    *,
    low_power: bool = False,
    removable: bool = False,
    headless: bool = False,
    unified_memory: bool = False,
    working_set: int = 4 * GIB,
    mac2: bool = True,
    apple: bool = False,
) -> dict[str, Any]:
    return {
        "name": name,
        "registry_id": registry_id,
        "low_power": low_power,
        "removable": removable,
        "headless": headless,
        "unified_memory": unified_memory,
        "working_set": working_set,
        "supports_mac2": mac2,
        "apple_gpu": apple,
    }


UHD630 = _device(
    "Intel(R) UHD Graphics 630",
    0x1001,
    low_power=True,
    unified_memory=True,
    working_set=1536 * 1024**2,
)
PRO5500M = _device("AMD Radeon Pro 5500M", 0x2001, working_set=8 * GIB)
VEGA_II_A = _device("AMD Radeon Pro Vega II", 0x3001, working_set=32 * GIB)
VEGA_II_B = _device("AMD Radeon Pro Vega II", 0x3002, headless=True, working_set=32 * GIB)
M1 = _device("Apple M1", 0x4001, unified_memory=True, apple=True, working_set=11 * GIB)
# The only Metal device of a macOS VM (GitHub's hosted macOS runners): not GPU family Mac2.
PARAVIRT = _device("Apple Paravirtual device", 0x5001, mac2=False, working_set=1 * GIB)

FAKE_MACS: dict[str, list[dict[str, Any]]] = {
    "mac-mini-2018": [UHD630],
    "macbook-pro-16-2019": [UHD630, PRO5500M],
    "mac-pro-2019": [VEGA_II_A, VEGA_II_B],
    "apple-m1": [M1],
    "macos-vm": [PARAVIRT],
    "no-devices": [],
}
