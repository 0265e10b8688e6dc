// MPSDeviceSelection.h: the Metal device choice of intelmac-torch, as the rest
// of ATen sees it. Added by the intelmac-torch patch series
// (0002-mps-device-selection-objcxx); MPSDevice.h includes it (patch 0005).
//
// Everything here is defined in MPSDeviceSelection.mm, which holds the one
// policy::DeviceState of the process (MPSDevicePolicy.h). Upstream files call
// these functions from one-line hooks (patches 0004 and 0005); the Python layer
// reaches the same state through the operators that file registers
// (torch.ops.intelmac.mps_*).
#pragma once

#include <c10/macros/Macros.h>

#include <string>

namespace at::mps {

// Why MPS is unavailable, in words; empty while a device is in use. Names the
// real cause (only an Intel GPU that was not opted in, no device with Metal GPU
// family Mac2, a PYTORCH_MPS_DEVICE that picks nothing, a macOS too old).
TORCH_API std::string unavailableReason();

// A core count for getCoreCount() where IORegistry has none (Intel and AMD
// GPUs have no AGXAccelerator entry): derived from the device's name; 0 while
// no device is in use.
TORCH_API int fallbackCoreCount();

// Whether the device in use may compile Metal 4 shaders: Apple GPUs only. Intel
// and AMD GPUs stay on Metal 3.x even on macOS 26.
TORCH_API bool deviceSupportsMetal4();

} // namespace at::mps

#ifdef __OBJC__
namespace at::mps {

// The position in `devices` (MTLCopyAllDevices(), in its order) of the device
// the policy chooses, or NSNotFound. The MPSDevice constructor asks this once,
// before its loop, and keeps only that device: the policy has seen every
// device, so the choice does not depend on their order. Each call is a scan.
TORCH_API NSUInteger policyChoice(NSArray* devices);

} // namespace at::mps
#endif
