"""torchvision checks that run *inside* the venv our torch and torchvision were installed into.

``ci/test_wheel.py --companion-version V`` runs this file with the venv's Python (standard
library, torch and torchvision only). Each check prints ``PASS name`` or ``FAIL name: why``;
the exit status is the number of failures (capped at 100).

* ``torchvision-version``, ``requires-our-torch``: the installed torchvision is ours and its
  METADATA requires exactly the torch installed beside it;
* ``ops-registered``, ``mps-kernels-registered``: the five ops the MPS backend has kernels
  for are registered for the CPU and for the MPS dispatch key (registration happens when
  ``torchvision._C`` loads, with or without a usable GPU, so a hosted runner checks it too);
* ``cpu-<op>``: each op on the CPU, against answers that follow from its definition;
* ``--device mps``: each op (forward, and backward where MPS has a kernel) on the device,
  against the CPU, on seeded random inputs.
* ``image-io-*``: JPEG, PNG and WebP images made with Pillow here, decoded by
  ``torchvision.io`` and compared with Pillow's decoding of the same bytes (PNG and lossless
  WebP exactly, JPEG within what two IDCTs may differ by), and JPEG/PNG encoded by torchvision
  and read back by Pillow; ``read_image`` from a file. A torchvision built without a codec
  fails here with torchvision's own message ("not compiled with ... support").
"""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Callable
from importlib import metadata
from typing import Any

OPS = ("nms", "roi_align", "roi_pool", "ps_roi_align", "ps_roi_pool")
#: Ops whose backward also has an MPS kernel (REGISTER_*_BACKWARD_OP in the Metal source).
WITH_BACKWARD = ("roi_align", "roi_pool", "ps_roi_align", "ps_roi_pool")
ATOL = RTOL = 1e-4
#: JPEG decoders may round their IDCTs differently (libjpeg-turbo's SIMD paths vs another
#: build): allow a few levels per pixel, far below what a wrong decode gives (tens).
JPEG_MAX_DIFF, JPEG_MEAN_DIFF = 8, 1.0
IMAGE_CHECKS = ("image-io-decode-jpeg", "image-io-decode-png", "image-io-decode-webp",
                "image-io-encode-jpeg", "image-io-encode-png", "image-io-read-image")


class CheckFailed(Exception):
    pass


def require(condition: bool, message: str) -> None:
    if not condition:
        raise CheckFailed(message)


def per_channel(torch: Any, channels: int) -> Any:
    """A 1x``channels``x8x8 map whose channel c holds the constant 10*c everywhere."""
    values = torch.arange(channels, dtype=torch.float32) * 10
    return values.view(1, channels, 1, 1).expand(1, channels, 8, 8).contiguous()


def call(ops: Any, op: str, x: Any, boxes: Any) -> Any:
    """One op on a feature map and rois (``[batch, x1, y1, x2, y2]`` rows), 2x2 output."""
    if op == "roi_align":
        return ops.roi_align(x, boxes, output_size=2, spatial_scale=1.0, sampling_ratio=2)
    if op == "ps_roi_align":
        return ops.ps_roi_align(x, boxes, output_size=2, spatial_scale=1.0, sampling_ratio=2)
    return getattr(ops, op)(x, boxes, output_size=2, spatial_scale=1.0)


class Checks:
    def __init__(self, expect_version: str | None, device: str | None) -> None:
        import torch
        import torchvision
        from torchvision import ops

        self.torch, self.torchvision, self.ops = torch, torchvision, ops
        self.expect_version = expect_version
        self.device = device
        self.failures = 0

    def run(self, name: str, check: Callable[[], None]) -> None:
        try:
            check()
        except CheckFailed as exc:
            self.failures += 1
            print(f"FAIL {name}: {exc}", flush=True)
        except Exception:  # a crash inside a check is a failure with its traceback
            self.failures += 1
            print(f"FAIL {name}: raised\n{traceback.format_exc()}", flush=True)
        else:
            print(f"PASS {name}", flush=True)

    def version(self) -> None:
        found = self.torchvision.__version__
        require(not self.expect_version or found == self.expect_version,
                f"torchvision {found}, expected {self.expect_version}")

    def requires_our_torch(self) -> None:
        wanted = f"torch=={self.torch.__version__}"
        found = [r.replace(" ", "") for r in metadata.requires("torchvision") or []
                 if r.replace(" ", "").startswith("torch") and not r.startswith("torchvision")]
        require(wanted in [r.replace("(", "").replace(")", "") for r in found],
                f"METADATA requires {found or 'no torch'}, expected {wanted}")

    def registered(self, key: str) -> None:
        missing = [op for op in OPS
                   if not self.torch._C._dispatch_has_kernel_for_dispatch_key(
                       f"torchvision::{op}", key)]
        require(not missing, f"no {key} kernel for {', '.join(missing)}"
                + (" (built without FORCE_MPS=1?)" if key == "MPS" else ""))

    def cpu_nms(self) -> None:
        torch = self.torch
        boxes = torch.tensor([[0, 0, 10, 10], [1, 1, 11, 11], [20, 20, 30, 30],
                              [0, 0, 10, 10.5]], dtype=torch.float32)
        scores = torch.tensor([0.9, 0.8, 0.7, 0.95])
        # Box 3 wins; 0 and 1 overlap it by IoU 0.95 and 0.72; 2 overlaps nothing.
        kept = self.ops.nms(boxes, scores, 0.5).tolist()
        require(kept == [3, 2], f"kept {kept}, expected [3, 2]")

    def cpu_pooling(self, op: str) -> None:
        torch = self.torch
        sensitive = op.startswith("ps_")
        x = per_channel(torch, 4)
        boxes = torch.tensor([[0, 1, 1, 6, 6]], dtype=torch.float32)
        out = call(self.ops, op, x, boxes)
        if sensitive:
            # Position-sensitive: output bin (i, j) reads only input channel 2*i + j.
            expected = torch.tensor([[[[0.0, 10.0], [20.0, 30.0]]]])
        else:
            # Every bin of channel c averages (or maxes) the constant 10*c.
            expected = per_channel(torch, 4)[:, :, :2, :2]
        require(tuple(out.shape) == tuple(expected.shape),
                f"shape {tuple(out.shape)}, expected {tuple(expected.shape)}")
        require(torch.allclose(out, expected, atol=1e-5), f"{out.tolist()} != {expected.tolist()}")
        if op == "roi_align":
            # On a map that grows along the width, bins further right read larger values.
            ramp = torch.arange(8, dtype=torch.float32).expand(1, 1, 8, 8).contiguous()
            row = call(self.ops, op, ramp, boxes)[0, 0, 0]
            require(bool(row[0] < row[1]), f"bins {row.tolist()} do not follow the ramp")

    def on_device(self, op: str) -> None:
        torch = self.torch
        generator = torch.Generator().manual_seed(0)
        if op == "nms":
            corners = torch.rand(64, 2, generator=generator) * 50
            boxes = torch.cat([corners, corners + 5 + torch.rand(64, 2, generator=generator) * 20], 1)
            scores = torch.randperm(64, generator=generator).float() / 64  # no ties
            want = self.ops.nms(boxes, scores, 0.5)
            got = self.ops.nms(boxes.to(self.device), scores.to(self.device), 0.5).cpu()
            require(torch.equal(got, want), f"kept {got.tolist()} vs CPU {want.tolist()}")
            return
        x = torch.rand(2, 8, 16, 16, generator=generator)
        starts = torch.rand(6, 2, generator=generator) * 8
        boxes = torch.cat([torch.tensor([[0.0], [1.0]]).repeat(3, 1), starts,
                           starts + 2 + torch.rand(6, 2, generator=generator) * 6], 1)
        xc = x.clone().requires_grad_(True)
        xd = x.to(self.device).requires_grad_(True)
        want, got = call(self.ops, op, xc, boxes), call(self.ops, op, xd, boxes.to(self.device))
        require(torch.allclose(got.detach().cpu(), want.detach(), atol=ATOL, rtol=RTOL),
                f"forward differs from the CPU by {float((got.detach().cpu() - want).abs().max()):.3g}")
        if op in WITH_BACKWARD:
            weight = torch.rand(want.shape, generator=generator)
            (want * weight).sum().backward()
            (got * weight.to(self.device)).sum().backward()
            diff = float((xd.grad.cpu() - xc.grad).abs().max())
            require(torch.allclose(xd.grad.cpu(), xc.grad, atol=ATOL, rtol=RTOL),
                    f"gradient differs from the CPU by {diff:.3g}")


def test_image() -> Any:
    """A 24x32 RGB Pillow image with edges, gradients and every channel used differently."""
    from PIL import Image

    image = Image.new("RGB", (32, 24))
    image.putdata([((x * 8) % 256, (y * 10) % 256, ((x + y) * 5 + (40 if x > 15 else 0)) % 256)
                   for y in range(24) for x in range(32)])
    return image


class ImageChecks:
    """torchvision.io against Pillow, on images Pillow encodes here (Pillow comes with
    torchvision: it is one of its requirements)."""

    def __init__(self, torch: Any, torchvision: Any) -> None:
        self.torch, self.io = torch, torchvision.io

    def encoded(self, fmt: str, **options: Any) -> bytes:
        import io

        buffer = io.BytesIO()
        test_image().save(buffer, fmt, **options)
        return buffer.getvalue()

    def pillow_tensor(self, data: bytes) -> Any:
        """Pillow's decoding of ``data``, as torchvision lays it out (C, H, W uint8)."""
        import io

        from PIL import Image

        with Image.open(io.BytesIO(data)) as image:
            rgb = image.convert("RGB")
            raw = bytearray(rgb.tobytes())
        return self.torch.frombuffer(raw, dtype=self.torch.uint8).view(
            rgb.height, rgb.width, 3).permute(2, 0, 1).contiguous()

    def as_tensor(self, data: bytes) -> Any:
        return self.torch.frombuffer(bytearray(data), dtype=self.torch.uint8)

    def compare(self, got: Any, want: Any, exact: bool, what: str) -> None:
        require(tuple(got.shape) == tuple(want.shape),
                f"{what}: shape {tuple(got.shape)}, Pillow's {tuple(want.shape)}")
        require(got.dtype == self.torch.uint8, f"{what}: dtype {got.dtype}, expected uint8")
        diff = (got.int() - want.int()).abs()
        if exact:
            require(bool((diff == 0).all()), f"{what}: differs from Pillow's decoding in "
                    f"{int((diff > 0).sum())} values (max {int(diff.max())})")
        else:
            require(int(diff.max()) <= JPEG_MAX_DIFF and float(diff.float().mean()) <= JPEG_MEAN_DIFF,
                    f"{what}: differs from Pillow's decoding by up to {int(diff.max())} "
                    f"(mean {float(diff.float().mean()):.2f}; allowed {JPEG_MAX_DIFF}, "
                    f"{JPEG_MEAN_DIFF})")

    def decode(self, fmt: str) -> None:
        options = {"JPEG": {"quality": 95}, "PNG": {}, "WEBP": {"lossless": True}}[fmt]
        data = self.encoded(fmt, **options)
        decoder = getattr(self.io, f"decode_{fmt.lower()}", None)
        require(decoder is not None, f"torchvision.io has no decode_{fmt.lower()}")
        got = decoder(self.as_tensor(data))
        self.compare(got, self.pillow_tensor(data), exact=fmt != "JPEG",
                     what=f"decode_{fmt.lower()}")

    def encode(self, fmt: str) -> None:
        original = self.pillow_tensor(self.encoded("PNG"))
        if fmt == "JPEG":
            data = self.io.encode_jpeg(original, quality=95)
        else:
            data = self.io.encode_png(original)
        raw = bytes(data.tolist())
        magic = {"JPEG": b"\xff\xd8\xff", "PNG": b"\x89PNG"}[fmt]
        require(raw.startswith(magic), f"encode_{fmt.lower()} wrote {raw[:8]!r}, not a {fmt}")
        back = self.pillow_tensor(raw)
        if fmt == "PNG":
            self.compare(back, original, exact=True, what="encode_png, read back by Pillow")
        else:
            error = float((back.int() - original.int()).abs().float().mean())
            require(error < 4, f"encode_jpeg at quality 95, read back by Pillow, is off by "
                    f"{error:.2f} per value on average")

    def read_image(self) -> None:
        import os
        import tempfile

        with tempfile.TemporaryDirectory() as scratch:
            for fmt, suffix in (("PNG", "png"), ("JPEG", "jpg"), ("WEBP", "webp")):
                data = self.encoded(fmt, **({"lossless": True} if fmt == "WEBP" else {}))
                path = os.path.join(scratch, f"image.{suffix}")
                with open(path, "wb") as handle:
                    handle.write(data)
                got = self.io.read_image(path)
                self.compare(got, self.pillow_tensor(data), exact=fmt != "JPEG",
                             what=f"read_image of a {fmt} file")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--expect-version", help="torchvision.__version__, e.g. 0.29.1+intelmac")
    parser.add_argument("--device", help="also run the ops on this device against the CPU (mps)")
    args = parser.parse_args(argv)
    checks = Checks(args.expect_version, args.device)
    checks.run("torchvision-version", checks.version)
    checks.run("requires-our-torch", checks.requires_our_torch)
    checks.run("ops-registered", lambda: checks.registered("CPU"))
    checks.run("mps-kernels-registered", lambda: checks.registered("MPS"))
    checks.run("cpu-nms", checks.cpu_nms)
    for op in OPS[1:]:
        checks.run(f"cpu-{op}", lambda op=op: checks.cpu_pooling(op))
    images = ImageChecks(checks.torch, checks.torchvision)
    for name in IMAGE_CHECKS:
        action, _, fmt = name.removeprefix("image-io-").partition("-")
        if action == "read":
            checks.run(name, images.read_image)
        else:
            method = images.decode if action == "decode" else images.encode
            checks.run(name, lambda method=method, fmt=fmt: method(fmt.upper()))
    if args.device:
        for op in OPS:
            checks.run(f"{args.device}-vs-cpu-{op}", lambda op=op: checks.on_device(op))
    print(f"{checks.failures} torchvision check(s) failed" if checks.failures
          else "all torchvision checks passed")
    return min(checks.failures, 100)


if __name__ == "__main__":
    sys.exit(main())
