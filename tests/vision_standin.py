"""A stand-in torchvision for tests on a machine where no real one can run.

The registry's Linux torchvision wheels link CUDA torch, and this project's tests run on a
CPU-only torch offline, so the checks of torchvision (ci/vision_checks.py, the regression
suite's tests/regress/_vision.py) are tested against this package: it registers the five
MPS-capable ops with the dispatcher the way torchvision's ``_C`` does, for CPU (and MPS,
when "built with FORCE_MPS"), with simple kernels written in torch. It exercises the checks,
the registration probes and the reporting, never torchvision's own kernels.

Its ``torchvision.io`` decodes and encodes through Pillow (what a torchvision with every
codec built in must agree with), and can be told to lack a codec, as a torchvision whose
setup.py did not find libjpeg, libpng or libwebp does, or to decode PNG wrongly.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

STAND_IN = '''
"""Stand-in torchvision: the five MPS-capable ops, registered as torchvision's _C does."""
import json
import torch
import torch.nn.functional as F

KNOBS = json.loads({knobs!r})
__version__ = KNOBS["version"]
_lib = torch.library.Library("torchvision", "DEF")
_SCHEMAS = {{
    "nms": "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "roi_align": "roi_align(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, "
                 "SymInt pooled_width, int sampling_ratio, bool aligned) -> Tensor",
    "roi_pool": "roi_pool(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, "
                "SymInt pooled_width) -> Tensor",
    "ps_roi_align": "ps_roi_align(Tensor input, Tensor rois, float spatial_scale, "
                    "SymInt pooled_height, SymInt pooled_width, int sampling_ratio) -> Tensor",
    "ps_roi_pool": "ps_roi_pool(Tensor input, Tensor rois, float spatial_scale, "
                   "SymInt pooled_height, SymInt pooled_width) -> Tensor",
}}


def _nms(dets, scores, iou_threshold):
    order = torch.argsort(scores, descending=True)
    if KNOBS.get("broken_nms"):
        return order
    keep = []
    area = (dets[:, 2] - dets[:, 0]) * (dets[:, 3] - dets[:, 1])
    for i in order.tolist():
        ok = True
        for j in keep:
            lt = torch.maximum(dets[i, :2], dets[j, :2])
            rb = torch.minimum(dets[i, 2:], dets[j, 2:])
            inter = (rb - lt).clamp(min=0).prod()
            if inter / (area[i] + area[j] - inter) > iou_threshold:
                ok = False
                break
        if ok:
            keep.append(i)
    return torch.tensor(keep, dtype=torch.int64, device=dets.device)


def _crops(x, rois, scale, ph, pw, pool):
    out = []
    for roi in rois:
        b, x1, y1, x2, y2 = [float(v) for v in roi]
        c0, r0 = int(x1 * scale), int(y1 * scale)
        c1, r1 = max(int(x2 * scale), c0 + 1), max(int(y2 * scale), r0 + 1)
        out.append(pool(x[int(b), :, r0:r1 + 1, c0:c1 + 1], (ph, pw)))
    return torch.stack(out)


def _sensitive(pooled, ph, pw):
    # Output bin (i, j) of output channel c reads input channel (c * ph + i) * pw + j.
    k, channels = pooled.shape[:2]
    out = pooled.new_empty(k, channels // (ph * pw), ph, pw)
    for c in range(out.shape[1]):
        for i in range(ph):
            for j in range(pw):
                out[:, c, i, j] = pooled[:, (c * ph + i) * pw + j, i, j]
    return out


_KERNELS = {{
    "nms": _nms,
    "roi_align": lambda x, r, s, ph, pw, sr, al: _crops(x, r, s, ph, pw, F.adaptive_avg_pool2d),
    "roi_pool": lambda x, r, s, ph, pw: _crops(x, r, s, ph, pw, F.adaptive_max_pool2d),
    "ps_roi_align": lambda x, r, s, ph, pw, sr: _sensitive(
        _crops(x, r, s, ph, pw, F.adaptive_avg_pool2d), ph, pw),
    "ps_roi_pool": lambda x, r, s, ph, pw: _sensitive(
        _crops(x, r, s, ph, pw, F.adaptive_max_pool2d), ph, pw),
}}
for _name, _schema in _SCHEMAS.items():
    _lib.define(_schema)
    # The kernels are plain torch code: registered for autograd too, so backward works.
    for _key in ["CPU", "AutogradCPU"] + (["MPS"] if KNOBS["mps"] else []):
        _lib.impl(_name, _KERNELS[_name], _key)
'''

IO_PY = '''
"""Stand-in torchvision.io: Pillow's codecs, or none for a codec left out at build time."""
import io
import json

import torch
from PIL import Image

KNOBS = json.loads({knobs!r})
_LIBRARY = {{"jpeg": "libjpeg", "png": "libpng", "webp": "libwebp"}}


def _require(codec):
    if codec in KNOBS.get("missing", []):
        # torchvision's own words when setup.py did not find the library.
        raise RuntimeError(f"torchvision not compiled with {{_LIBRARY[codec]}} support")


def _tensor(image):
    rgb = image.convert("RGB")
    data = bytearray(rgb.tobytes())
    return torch.frombuffer(data, dtype=torch.uint8).view(rgb.height, rgb.width, 3).permute(2, 0, 1).contiguous()


def _decode(data, codec):
    _require(codec)
    with Image.open(io.BytesIO(bytes(data.tolist()))) as image:
        out = _tensor(image)
    if codec in KNOBS.get("swap_channels", []):
        out = out.flip(0)
    return out


def decode_jpeg(data, *args, **kwargs):
    return _decode(data, "jpeg")


def decode_png(data, *args, **kwargs):
    return _decode(data, "png")


def decode_webp(data, *args, **kwargs):
    return _decode(data, "webp")


def decode_image(data, *args, **kwargs):
    head = bytes(data[:12].tolist())
    if head.startswith(b"\\xff\\xd8"):
        return decode_jpeg(data)
    if head.startswith(b"\\x89PNG"):
        return decode_png(data)
    return decode_webp(data)


def read_file(path):
    with open(path, "rb") as handle:
        return torch.frombuffer(bytearray(handle.read()), dtype=torch.uint8)


def read_image(path, *args, **kwargs):
    return decode_image(read_file(path))


def _encode(tensor, codec, **options):
    _require(codec)
    image = Image.fromarray(tensor.permute(1, 2, 0).contiguous().numpy())
    buffer = io.BytesIO()
    image.save(buffer, codec.upper(), **options)
    return torch.frombuffer(bytearray(buffer.getvalue()), dtype=torch.uint8)


def encode_jpeg(tensor, quality=75):
    return _encode(tensor, "jpeg", quality=quality)


def encode_png(tensor, compression_level=6):
    return _encode(tensor, "png")
'''

OPS_PY = '''
import torch


def nms(boxes, scores, iou_threshold):
    return torch.ops.torchvision.nms(boxes, scores, iou_threshold)


def roi_align(input, boxes, output_size, spatial_scale=1.0, sampling_ratio=-1, aligned=False):
    return torch.ops.torchvision.roi_align(input, boxes, spatial_scale, output_size, output_size,
                                           sampling_ratio, aligned)


def roi_pool(input, boxes, output_size, spatial_scale=1.0):
    return torch.ops.torchvision.roi_pool(input, boxes, spatial_scale, output_size, output_size)


def ps_roi_align(input, boxes, output_size, spatial_scale=1.0, sampling_ratio=-1):
    return torch.ops.torchvision.ps_roi_align(input, boxes, spatial_scale, output_size,
                                              output_size, sampling_ratio)


def ps_roi_pool(input, boxes, output_size, spatial_scale=1.0):
    return torch.ops.torchvision.ps_roi_pool(input, boxes, spatial_scale, output_size,
                                             output_size)
'''


def stand_in(root: Path, **knobs: Any) -> Path:
    """A site folder with a stand-in torchvision and its dist-info."""
    settings = {"version": "0.1.0+intelmac", "mps": True, "requires": f"torch=={torch.__version__}"}
    settings.update(knobs)
    package = root / "torchvision"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        STAND_IN.format(knobs=json.dumps(settings)) + "\nfrom . import io, ops\n"
    )
    (package / "ops.py").write_text(OPS_PY)
    (package / "io.py").write_text(IO_PY.format(knobs=json.dumps(settings)))
    dist_info = root / f"torchvision-{settings['version']}.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: torchvision\nVersion: {settings['version']}\n"
        f"Requires-Dist: numpy\nRequires-Dist: {settings['requires']}\n"
    )
    return root
