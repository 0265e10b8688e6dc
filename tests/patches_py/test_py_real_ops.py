"""The Python layer over the real torch.ops dispatcher, with the operators' own schemas.

MPSDeviceSelection.mm registers its operators with TORCH_LIBRARY(intelmac), which only a Mac
build runs. Here the installed (CPU) torch defines the very schemas that file declares, in
the same namespace, with Python kernels over the policy shim (the real MPSDevicePolicy.h),
and the new module _device_policy.py runs against them. That checks what the sandbox's
stand-in torch.ops cannot: that the schemas parse, that operators without a tensor argument
dispatch, that `str[]` comes back as a list, and that warnings queued in C++ reach Python
once, through mps_take_warnings().
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from intelmac_torch_builder.core.contract import ALLOW_ENV
from intelmac_torch_builder.maint import check_upstream
from py_support import REPO
from test_py_patch_0003 import registered_ops

MODULE = REPO / "patches" / "src" / "torch" / "backends" / "mps" / "_device_policy.py"

# Runs in a fresh interpreter: the real torch, the operators defined from their schemas,
# Python kernels over the shim, then the new module's public functions.
SCRIPT = r'''
import importlib.util, json, sys, warnings
sys.path.insert(0, sys.argv[3])
import standin_c as shim  # configures the shim for the pretend Mac in the environment
import torch

KERNELS = {
    "mps_get_allow_intel_gpu": lambda: bool(shim._lib.shim_get_allow()),
    "mps_unavailable_reason": lambda: shim._lib.shim_unavailable_reason().decode(),
    "mps_device_report": lambda: shim._lib.shim_report_json().decode(),
    "mps_take_warnings": lambda: [w for w in shim._lib.shim_take_warnings().decode().split("\x1e") if w],
}


def set_allow(allow):
    if shim._lib.shim_set_allow(int(allow)):
        raise RuntimeError(shim._lib.shim_error().decode())  # what TORCH_CHECK becomes


KERNELS["mps_set_allow_intel_gpu"] = set_allow
lib = torch.library.Library("intelmac", "DEF")
for name, schema in json.loads(sys.argv[1]).items():
    lib.define(schema)
    lib.impl(name, KERNELS[name], "CompositeImplicitAutograd")
torch._C._has_mps = True  # the module asks this before it calls any operator

spec = importlib.util.spec_from_file_location("device_policy", sys.argv[2])
policy = importlib.util.module_from_spec(spec)
spec.loader.exec_module(policy)

records = []
for step in ("get", "devices", "allow", "reason", "devices", "disallow", "get"):
    record = {"step": step}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            if step == "get":
                record["value"] = policy.get_allow_intel_gpu()
            elif step == "devices":
                record["value"] = [d._asdict() for d in policy.devices()]
            elif step == "allow":
                policy.set_allow_intel_gpu(True)
            elif step == "disallow":
                policy.set_allow_intel_gpu(False)
            elif step == "reason":
                record["value"] = policy.unavailable_reason()
        except Exception as exc:
            record["error"] = type(exc).__name__ + ": " + str(exc)
    record["warnings"] = [str(w.message) for w in caught]
    records.append(record)
print(json.dumps(records))
'''


@pytest.mark.slow
def test_the_layer_over_real_torch_ops(shim: Path, tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    if not hasattr(torch, "library") or not hasattr(torch.library, "Library"):
        pytest.skip("this torch has no torch.library")
    (tmp_path / "standin_c.py").write_text(check_upstream._STANDIN_C, encoding="utf-8")
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("PYTORCH_MPS_")},
        "INTELMAC_SANDBOX_SHIM": str(shim),
        "INTELMAC_SANDBOX_MAC": json.dumps(check_upstream.FAKE_MACS["mac-mini-2018"]),
        ALLOW_ENV: "maybe",
    }
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, json.dumps(registered_ops()), str(MODULE), str(tmp_path)],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    get, before, allow, reason, after, disallow, get_again = json.loads(done.stdout)
    intel = check_upstream.UHD630["name"]

    assert get["value"] is False
    assert len(get["warnings"]) == 1 and f"{ALLOW_ENV}='maybe'" in get["warnings"][0], get
    assert [(d["name"], d["selected"]) for d in before["value"]] == [(intel, False)]
    assert "not used unless allowed" in before["value"][0]["skip_reason"]
    assert "error" not in allow, allow
    assert [w for w in allow["warnings"] if intel in w and "CPU" in w], "the low-power note, raised in Python"
    assert reason["value"] is None
    assert [(d["name"], d["selected"], d["skip_reason"]) for d in after["value"]] == [(intel, True, None)]
    assert disallow["error"].startswith("RuntimeError: The MPS device is already in use"), disallow
    assert get_again["value"] is True and not get_again["warnings"]
    every = [w for r in (get, before, allow, reason, after, disallow, get_again) for w in r["warnings"]]
    assert len(every) == 2, every
