"""Compiling Objective-C++ on Linux against the stand-in Metal, and what goes into each line's build.

Toolchain (the project's shared notes, OBJC-ON-LINUX.md, have the background):

- clang++ with GCC's Objective-C runtime (``-fobjc-runtime=gcc``) and GNUstep base as
  Foundation; blocks (``addCompletedHandler:^...``) from LLVM's libBlocksRuntime.
- Debian packages: ``libgnustep-base-dev`` (brings GCC's libobjc), ``libblocksruntime-dev``
  and ``clang``. ``missing()`` names what is absent.
- C++ exceptions: for Objective-C++ with the GCC runtime, clang emits the Objective-C
  personality routine, which never catches a C++ exception (a ``catch`` in such a file,
  or torch's dispatcher unwinding through one, ends in std::terminate). The files have no
  ``@catch``, so each one is compiled to assembly, the personality is renamed to C++'s
  (``__gxx_personality_v0``, which reads the same LSDA format) and then assembled. That
  is what TORCH_CHECK in our file needs to reach Python as RuntimeError, as on a Mac.

Per release line, ``line_library`` builds one shared library loaded with
``torch.ops.load_library`` into the test torch (2.13.0, CPU, Linux):

- our ``MPSDeviceSelection.mm`` as the line's series creates it;
- the line's ``MPSDevice.mm``: on 2.6.0 the exact upstream file with the series applied;
  on other lines a test copy built around the line's own hunks (``device_source``);
- ``harness.mm``: C entry points for the tests (is_available, the retained device, the
  core count), which stand in for torch._C's MPS bindings that a CPU torch lacks.

Headers: the line's own patched ``MPSDevice.h`` and our new headers always. ATen, c10
and torch: the line's own where its ABI links with the test torch (2.14.1 and 2.15.0);
2.6.0 and 2.9.1 declare ``torch::Library::_def`` with ``at::Tag``, which the test torch
renamed, so they take those of ``ABI_LINE`` (2.14.1, the nearest line that links) with
the line's own ``ATen/mps`` headers in front. ``ABI_HEADERS`` records the choice and the
test summary prints it.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
INCLUDE = HERE / "include"
SHADOW = HERE / "shadow"  # upstream headers that need Apple frameworks beyond Metal
FAKE_SOURCE = HERE / "fake_metal.mm"
HARNESS = HERE / "harness.mm"

GNUSTEP_INCLUDE = Path("/usr/include/GNUstep")
GCC_OBJC_INCLUDE_GLOB = "/usr/lib/gcc/x86_64-linux-gnu/*/include"

#: Lines whose own ATen/c10/torch headers link against the test torch.
ABI_LINE = "2.14.1"
LINES_WITH_OWN_ABI = ("2.14.1", "2.15.0")

APT_PACKAGES = ("clang", "libgnustep-base-dev", "libblocksruntime-dev")
HOW_TO_GET = "apt-get install -y " + " ".join(APT_PACKAGES) + " (Debian/Ubuntu; .ci/run does it)"


def gcc_objc_include() -> Path | None:
    import glob

    found = sorted(glob.glob(GCC_OBJC_INCLUDE_GLOB + "/objc/objc.h"))
    return Path(found[-1]).parent.parent if found else None


def missing() -> list[str]:
    """What the stand-in needs and this machine lacks, by package."""
    lacking = []
    if shutil.which("clang++") is None:
        lacking.append("clang (clang++)")
    if not (GNUSTEP_INCLUDE / "Foundation" / "Foundation.h").is_file():
        lacking.append("libgnustep-base-dev (GNUstep Foundation headers)")
    if gcc_objc_include() is None:
        lacking.append("GCC's Objective-C runtime headers (libobjc, with libgnustep-base-dev)")
    if not Path("/usr/include/Block.h").is_file():
        lacking.append("libblocksruntime-dev (Block.h, libBlocksRuntime)")
    return lacking


def objcxx_flags(std: str) -> list[str]:
    gcc = gcc_objc_include()
    return [
        "-x", "objective-c++", f"-std={std}",
        "-fobjc-runtime=gcc", "-fconstant-string-class=NSConstantString",
        "-DGNUSTEP", "-DGNU_RUNTIME=1", "-fexceptions", "-fobjc-exceptions", "-fblocks",
        "-fPIC", "-O0", "-g0",
        # As release wheels are built: TORCH_INTERNAL_ASSERT_DEBUG_ONLY (e.g. the
        # constructor's assert that a device was found) is off.
        "-DNDEBUG", "-Wall", "-Wno-unused-parameter", "-Wno-unused-function",
        f"-I{GNUSTEP_INCLUDE}", f"-I{gcc}",
    ]


# libBlocksRuntime first: GNUstep base exports a _Block_copy of its own that crashes on the
# blocks clang emits for the GCC runtime; whichever library comes first in DT_NEEDED wins.
LINK_LIBS = ["-lBlocksRuntime", "-lgnustep-base", "-lobjc"]


def compile_objcxx(source: Path, out: Path, includes: Sequence[str], std: str = "c++17") -> Path:
    """source.mm -> out (.o), with the personality routine made C++'s (module docstring)."""
    asm = out.with_suffix(".s")
    argv = ["clang++", *objcxx_flags(std), *includes, "-S", str(source), "-o", str(asm)]
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=600)
    if done.returncode != 0:
        raise CompileError(f"clang++ failed on {source.name}:\n{' '.join(argv)}\n{done.stderr[-8000:]}")
    text = asm.read_text(encoding="utf-8")
    asm.write_text(text.replace("__gnu_objc_personality_v0", "__gxx_personality_v0"), encoding="utf-8")
    done = subprocess.run(["clang++", "-c", str(asm), "-o", str(out)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise CompileError(f"assembling {asm.name} failed:\n{done.stderr[-4000:]}")
    return out


class CompileError(RuntimeError):
    pass


def fake_metal_library(work: Path) -> Path:
    """libfakemetal.so: the stand-in Metal, Foundation extras and IOKit."""
    work.mkdir(parents=True, exist_ok=True)
    obj = compile_objcxx(FAKE_SOURCE, work / "fake_metal.o", [f"-I{INCLUDE}"])
    lib = work / "libfakemetal.so"
    link(lib, [obj], LINK_LIBS)
    return lib


def link(out: Path, objects: Sequence[Path], extra: Sequence[str], *, program: bool = False) -> Path:
    """A shared library of ``objects`` (a program with ``program``: a main() of its own)."""
    argv = ["clang++", *([] if program else ["-shared"]), "-o", str(out), *map(str, objects), *extra]
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=300)
    if done.returncode != 0:
        raise CompileError(f"linking {out.name} failed:\n{' '.join(argv)}\n{done.stderr[-6000:]}")
    return out


# --- MPSDevice.mm per line ---------------------------------------------------------------

SUBSCRIPT = "id<MTLDevice> device = devices[i];"
SUBSCRIPT_REWRITE = "id<MTLDevice> device = [devices objectAtIndex:i];"


def rewrite_subscripting(text: str) -> str:
    """The one rewrite a test copy of upstream's MPSDevice.mm needs: GCC's runtime has no
    object subscripting, so ``devices[i]`` becomes ``[devices objectAtIndex:i]``."""
    if text.count(SUBSCRIPT) != 1:
        raise CompileError(f"expected exactly one '{SUBSCRIPT}' in MPSDevice.mm")
    return text.replace(SUBSCRIPT, SUBSCRIPT_REWRITE)


def device_hunks(patch_text: str) -> list[list[str]]:
    """Post-images (context and added lines) of the series' hunks on MPSDevice.mm."""
    import unidiff

    out = []
    for patched in unidiff.PatchSet(patch_text):
        if patched.path.removeprefix("b/") != "aten/src/ATen/mps/MPSDevice.mm":
            continue
        for hunk in patched:
            out.append([line.value.rstrip("\n") for line in hunk if not line.is_removed])
    return out


def _constructor_tail(exact_260: str, last_line: str) -> list[str]:
    """2.6.0's constructor after ``last_line`` (the end of a line's hunk) to its end."""
    lines = exact_260.splitlines()
    start = lines.index("MPSDevice::MPSDevice() : _mtl_device(nil) {")
    end = lines.index("}", start)
    body = lines[start:end + 1]
    position = [i for i, text in enumerate(body) if text == last_line]
    if len(position) != 1:
        raise CompileError(f"the hunk's last line {last_line!r} is not once in 2.6.0's constructor")
    return body[position[0] + 1:]


# The probe of the lines that have one (2.6.0 to 2.14.1; 2.15.0's binary has no MPSGraph
# string): its shape is 2.6.0's. The stand-in's MPSGraph answers any selector from its
# configuration, so the selector's name is not what these tests check.
_PROBE = """\
  id mpsCD = NSClassFromString(@"MPSGraph");
  if ([mpsCD instancesRespondToSelector:@selector(cumulativeSumWithTensor:axis:name:)] == NO) {
    return;
  }
"""

# getCoreCount()'s IORegistry walk before the hunk (2.9.1 on), our reconstruction of its
# shape: upstream's text here is not in any wheel. Only the hunk's lines are the series'.
_CORE_COUNT_HEAD = """\
unsigned MPSDevice::getCoreCount() const {
  io_iterator_t iterator = 0;
  io_registry_entry_t entry = 0;
  int core_count = 0;
  auto matchingDict = IOServiceMatching("AGXAccelerator");
  TORCH_INTERNAL_ASSERT(matchingDict, "Failed to create matching dict");
  const auto status = IOServiceGetMatchingServices(kIOMainPortDefault, matchingDict, &iterator);
  TORCH_INTERNAL_ASSERT(status == KERN_SUCCESS);
  while ((entry = IOIteratorNext(iterator)) != 0) {
    auto property = IORegistryEntryCreateCFProperty(entry, CFSTR("gpu-core-count"), kCFAllocatorDefault, 0);
    auto found = CFNumberGetValue(static_cast<CFNumberRef>(property), kCFNumberIntType, &core_count);
    CFRelease(property);
    IOObjectRelease(entry);
    if (found) {
      break;
    }
  }
"""


def device_source(line: str, patch_text: str, exact_260: str) -> str:
    """The test's MPSDevice.mm of a line other than 2.6.0, built from the line's hunks.

    The constructor: (the probe, on lines that have one), then the post-image of the
    line's constructor hunk from ``NSArray* devices`` on (our hook and upstream's lines
    around it), then 2.6.0's loop tail from the hunk's last line on (the "Skipping
    device" warning, retain, break). getCoreCount(): the reconstructed head above, then
    the hunk's post-image from the loop's end. The rest of the file is not needed.
    """
    hunks = device_hunks(patch_text)
    ctor = next(h for h in hunks if any("policyChoice" in text for text in h))
    first = next(i for i, text in enumerate(ctor) if "NSArray* devices" in text)
    body = ctor[first:]
    while body and body[-1] == "":
        body.pop()
    parts = [
        "// Test copy for tests/fake_metal, not upstream's file: see build.py (device_source).",
        "#include <c10/util/CallOnce.h>",
        "#include <ATen/mps/MPSDevice.h>",
        "#include <IOKit/IOKitLib.h>",
        "",
        "namespace at::mps {",
        "",
        "MPSDevice* MPSDevice::getInstance() {",
        "  static MPSDevice mps_device;",
        "  return &mps_device;",
        "}",
        "",
        "MPSDevice::~MPSDevice() {",
        "  [_mtl_device release];",
        "  _mtl_device = nil;",
        "}",
        "",
        "MPSDevice::MPSDevice() : _mtl_device(nil) {",
    ]
    if line != "2.15.0":
        parts.append(_PROBE.rstrip("\n"))
        parts.append("")
    parts += body
    parts += _constructor_tail(exact_260, body[-1])
    core = next((h for h in hunks if any("fallbackCoreCount" in text for text in h)), None)
    if core is not None:
        start = next(i for i, text in enumerate(core) if "IOObjectRelease(iterator);" in text)
        end = next(i for i, text in enumerate(core) if i > start and text == "}")
        parts += ["", *_CORE_COUNT_HEAD.rstrip("\n").splitlines(), *core[start:end + 1]]
    parts += [
        "",
        "bool is_available() {",
        "  return MPSDevice::getInstance()->device() != nil;",
        "}",
        "",
        "} // namespace at::mps",
        "",
    ]
    return rewrite_subscripting("\n".join(parts))


@dataclass(frozen=True)
class LineBuild:
    line: str
    library: Path
    headers: str  # whose ATen/c10/torch headers were compiled against
    device_source: Path
    has_core_count: bool


def line_library(line: str, tree: Path, wheel_include: Path, abi_include: Path, std: str,
                 device_text: str, fake_lib: Path, torch_lib: Path, work: Path,
                 *, selection_source: Path | None = None) -> LineBuild:
    """Build the line's library (module docstring); ``tree`` holds the series' headers."""
    work.mkdir(parents=True, exist_ok=True)
    own_abi = line in LINES_WITH_OWN_ABI
    includes = [f"-I{tree / 'aten' / 'src'}", f"-I{INCLUDE}", f"-I{SHADOW}"]
    if not own_abi:
        # The line's own ATen/mps headers (IndexKernels.h, MPSAllocatorInterface.h ...) in
        # front of the ABI line's.
        overlay = work / "line-mps-headers"
        for sub in ("ATen/mps",):
            target = overlay / sub
            target.mkdir(parents=True, exist_ok=True)
            for header in (wheel_include / sub).glob("*.h"):
                if not (tree / "aten" / "src" / sub / header.name).exists() and not (SHADOW / sub / header.name).exists():
                    shutil.copy2(header, target / header.name)
        includes.append(f"-I{overlay}")
    base = wheel_include if own_abi else abi_include
    includes += ["-isystem", str(base), "-isystem", str(base / "torch" / "csrc" / "api" / "include")]
    device_mm = work / "MPSDevice.mm"
    device_mm.write_text(device_text, encoding="utf-8")
    has_core_count = "fallbackCoreCount" in device_text
    selection = selection_source or (tree / "aten" / "src" / "ATen" / "mps" / "MPSDeviceSelection.mm")
    line_std = std if own_abi else "c++20"  # the ABI line's headers need its standard
    objects = [
        compile_objcxx(selection, work / "MPSDeviceSelection.o", includes, line_std),
        compile_objcxx(device_mm, work / "MPSDevice.o", includes, line_std),
        compile_objcxx(HARNESS, work / "harness.o",
                       [*includes, f"-DINTELMAC_TEST_HAS_CORE_COUNT={int(has_core_count)}",
                        f"-DINTELMAC_TEST_ALLOCATOR_TAKES_BOOL={int(line in ('2.6.0', '2.9.1'))}",
                        f"-DINTELMAC_TEST_DEFINES_ALLOCATOR={int(line == '2.6.0')}"], line_std),
    ]
    probe = tree / "aten" / "src" / "ATen" / "mps" / "MPSKernelProbe.mm"
    if probe.exists():  # the kernel compile probe's operators (issue 25)
        objects.append(compile_objcxx(probe, work / "MPSKernelProbe.o", includes, line_std))
    library = work / f"libintelmac_mps_{line.replace('.', '_')}.so"
    link(library, objects, [
        str(fake_lib), f"-L{torch_lib}", "-ltorch_cpu", "-lc10", "-ltorch",
        f"-Wl,-rpath,{torch_lib}", f"-Wl,-rpath,{fake_lib.parent}",
        # Our at::mps functions bind to our own definitions, never to a torch library's.
        "-Wl,-Bsymbolic", "-Wl,--no-undefined", *LINK_LIBS,
    ])
    headers = f"{line} (own)" if own_abi else f"{ABI_LINE} for ATen/c10/torch, {line}'s ATen/mps headers"
    return LineBuild(line, library, headers, device_mm, has_core_count)
