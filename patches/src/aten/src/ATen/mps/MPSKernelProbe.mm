// MPSKernelProbe.mm: what the regression suite asks Metal about the GPU that MPS
// uses (issue 25). Added by the intelmac-torch patch series
// (0002-mps-device-selection-objcxx). Two operators, registered into the
// series' `intelmac` library:
//   torch.ops.intelmac.mps_kernel_probe(path) builds a compute pipeline for every
//     kernel function of the Metal library file at `path` (the suite cuts torch's
//     bundled library out of libtorch_cpu) and answers one line per function:
//     "ok\t<name>", "fail\t<name>\t<Metal's message>", or "skip\t<name>\t<why>"
//     for functions that are not kernels. Torch builds a pipeline only when an op
//     first runs, so a kernel that does not compile for this GPU stays hidden
//     until then; this finds it at once.
//   torch.ops.intelmac.mps_gpu_limits() answers JSON: the Metal GPU families the
//     device supports, a compute pipeline's threadExecutionWidth (its SIMD width),
//     the largest threadgroup and its memory.
// Metal calls (Apple's documentation, all available from macOS 10.13 on, except
// supportsFamily: from 10.15, which every macOS that MPS runs on has):
// newLibraryWithURL:error:, functionNames, newFunctionWithName:, functionType,
// newComputePipelineStateWithFunction:error: (builds the pipeline for this device;
// nil and an NSError when it cannot), threadExecutionWidth,
// maxTotalThreadsPerThreadgroup, maxThreadsPerThreadgroup,
// maxThreadgroupMemoryLength, newLibraryWithSource:options:error:.
// It calls nothing of upstream's but MPSDevice::getInstance()->device().
#include <ATen/mps/MPSDevice.h>
#include <torch/library.h>

#include <string>
#include <vector>

namespace at::mps {
namespace {

id<MTLDevice> probe_device() {
  id<MTLDevice> device = MPSDevice::getInstance()->device();
  TORCH_CHECK(device != nil, "MPS has no Metal device: torch.backends.mps.unavailable_reason() says why");
  return device;
}

std::string error_text(NSError* error) {
  if (error == nil) {
    return "no message";
  }
  const char* text = [[error localizedDescription] UTF8String];
  std::string out = text != nullptr ? text : "no message";
  for (char& c : out) {
    if (c == '\t' || c == '\n') {
      c = ' '; // one line per function
    }
  }
  return out;
}

std::vector<std::string> kernel_probe(const std::string& path) {
  id<MTLDevice> device = probe_device();
  NSError* error = nil;
  NSURL* url = [NSURL fileURLWithPath:[NSString stringWithUTF8String:path.c_str()]];
  id<MTLLibrary> library = [device newLibraryWithURL:url error:&error];
  TORCH_CHECK(library != nil, "Metal could not load the library ", path, ": ", error_text(error));
  std::vector<std::string> lines;
  for (NSString* name in [library functionNames]) {
    @autoreleasepool {
      std::string fname = [name UTF8String];
      id<MTLFunction> function = [library newFunctionWithName:name];
      if (function == nil) {
        lines.push_back("fail\t" + fname + "\tnewFunctionWithName: returned nil");
        continue;
      }
      if ([function functionType] != MTLFunctionTypeKernel) {
        lines.push_back("skip\t" + fname + "\tnot a kernel function");
        [function release];
        continue;
      }
      NSError* failure = nil;
      id<MTLComputePipelineState> pipeline = [device newComputePipelineStateWithFunction:function error:&failure];
      lines.push_back(pipeline != nil ? "ok\t" + fname : "fail\t" + fname + "\t" + error_text(failure));
      [pipeline release];
      [function release];
    }
  }
  [library release];
  return lines;
}

// A kernel of our own: the SIMD width Metal picks for a compute pipeline on this GPU.
constexpr const char* kWidthKernel =
    "kernel void intelmac_width(device float* x [[buffer(0)]], uint i [[thread_position_in_grid]]) "
    "{ x[i] += 1.0f; }";

struct Family {
  const char* name;
  MTLGPUFamily family;
};

std::string gpu_limits() {
  id<MTLDevice> device = probe_device();
  const Family families[] = {
      {"Common1", MTLGPUFamilyCommon1}, {"Common2", MTLGPUFamilyCommon2}, {"Common3", MTLGPUFamilyCommon3},
      {"Mac1", MTLGPUFamilyMac1},       {"Mac2", MTLGPUFamilyMac2},       {"Metal3", MTLGPUFamilyMetal3},
      {"Apple7", MTLGPUFamilyApple7},   {"Apple8", MTLGPUFamilyApple8},
  };
  std::string names;
  for (const Family& f : families) {
    if ([device supportsFamily:f.family]) {
      names += std::string(names.empty() ? "" : ", ") + "\"" + f.name + "\"";
    }
  }
  MTLSize largest = [device maxThreadsPerThreadgroup];
  std::string width = "null";
  std::string pipeline_threads = "null";
  NSError* error = nil;
  id<MTLLibrary> library = [device newLibraryWithSource:[NSString stringWithUTF8String:kWidthKernel]
                                                options:nil
                                                  error:&error];
  if (library != nil) {
    id<MTLFunction> function = [library newFunctionWithName:[NSString stringWithUTF8String:"intelmac_width"]];
    id<MTLComputePipelineState> pipeline =
        function != nil ? [device newComputePipelineStateWithFunction:function error:&error] : nil;
    if (pipeline != nil) {
      width = std::to_string([pipeline threadExecutionWidth]);
      pipeline_threads = std::to_string([pipeline maxTotalThreadsPerThreadgroup]);
    }
    [pipeline release];
    [function release];
    [library release];
  }
  return "{\"families\": [" + names + "], \"thread_execution_width\": " + width +
      ", \"pipeline_max_threads\": " + pipeline_threads +
      ", \"max_threads_per_threadgroup\": " + std::to_string(largest.width) +
      ", \"max_threadgroup_memory_bytes\": " + std::to_string([device maxThreadgroupMemoryLength]) + "}";
}

} // namespace
} // namespace at::mps

// The Python side: tests/regress/_kernels.py and _device.py of intelmac-torch.
TORCH_LIBRARY_FRAGMENT(intelmac, m) {
  m.def("mps_kernel_probe(str path) -> str[]", &at::mps::kernel_probe);
  m.def("mps_gpu_limits() -> str", &at::mps::gpu_limits);
}
