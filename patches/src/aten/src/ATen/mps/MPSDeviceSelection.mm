// MPSDeviceSelection.mm: the Objective-C++ shell around MPSDevicePolicy.h.
// Added by the intelmac-torch patch series (0002-mps-device-selection-objcxx).
//
// ATen's CMakeLists compiles every aten/src/ATen/mps/*.mm, so this file needs
// no build change. It does three things and decides nothing:
//   1. reads each Metal device's properties into policy::DeviceProps;
//   2. holds the process's one policy::DeviceState under a mutex and raises
//      what it queues (TORCH_WARN for warnings, TORCH_CHECK for a refusal);
//   3. gives that state to upstream's code (MPSDeviceSelection.h, called from
//      the hooks of patches 0004 and 0005) and to the Python layer, through the
//      operators registered at the end (torch.ops.intelmac.mps_*).
// It calls nothing of upstream's that differs between the release lines the
// series supports; `make test` / .ci/run parse it against each line's headers.
#include <ATen/mps/MPSDevice.h>
#include <ATen/mps/MPSDevicePolicy.h>
#include <ATen/mps/MPSDeviceSelection.h>
#include <torch/library.h>

#include <mutex>
#include <string>
#include <vector>

// MPSDevice.h defines it (patch 0005), per release line: the macOS that the
// line's MPS backend needs, named in the reason when upstream's MPSGraph probe
// in the MPSDevice constructor fails (lines that have that probe).
#if !defined(INTELMAC_MPS_MIN_MACOS)
#error "MPSDevice.h lacks the intelmac-torch hook of patch 0005 (INTELMAC_MPS_MIN_MACOS)"
#endif

namespace at::mps {
namespace {

struct LockedState {
  std::mutex mutex;
  policy::DeviceState state;
};

LockedState& locked_state() {
  static LockedState shared;
  return shared;
}

policy::DeviceProps device_props(id<MTLDevice> device) {
  policy::DeviceProps props;
  props.name = [[device name] UTF8String];
  props.low_power = [device isLowPower];
  props.removable = [device isRemovable];
  props.headless = [device isHeadless];
  props.unified_memory = [device hasUnifiedMemory];
  props.recommended_working_set_size = [device recommendedMaxWorkingSetSize];
  props.registry_id = [device registryID];
  props.supports_mac2 = [device supportsFamily:MTLGPUFamilyMac2];
  props.apple_gpu = [device supportsFamily:MTLGPUFamilyApple7];
  return props;
}

// What the policy needs to know about this line, with the probe's outcome.
policy::Platform line_platform(bool macos_ok) {
  return {macos_ok, INTELMAC_MPS_MIN_MACOS};
}

std::vector<policy::DeviceProps> all_device_props(NSArray* devices) {
  std::vector<policy::DeviceProps> props;
  for (id<MTLDevice> device in devices) {
    props.push_back(device_props(device));
  }
  return props;
}

// Set while one of the operators below runs: their warnings stay queued for
// mps_take_warnings(), because torch.ops calls have no handler that turns
// TORCH_WARN into a Python warning. Upstream's own entry points (is_available()
// through torch._C) have one, so elsewhere the warnings are raised at once.
thread_local bool defer_warnings = false;

struct DeferWarnings {
  DeferWarnings() : previous(defer_warnings) {
    defer_warnings = true;
  }
  ~DeferWarnings() {
    defer_warnings = previous;
  }
  DeferWarnings(const DeferWarnings&) = delete;
  DeferWarnings& operator=(const DeferWarnings&) = delete;
  bool previous;
};

// Called with the lock held after each call into the state.
void warn_queued(policy::DeviceState& state) {
  if (defer_warnings) {
    return;
  }
  for (const auto& warning : state.take_warnings()) {
    TORCH_WARN(warning);
  }
}

// The constructor does not scan when upstream's macOS probe fails; the report
// and the reason still list the devices, each skipped for that reason.
void scan_if_probe_failed(policy::DeviceState& state) {
  if (!state.scanned()) {
    @autoreleasepool {
      state.scan(all_device_props([MTLCopyAllDevices() autorelease]), line_platform(false));
    }
  }
}

// The device in use, as the policy saw it; nullptr while there is none.
template <typename F>
auto with_chosen(F&& use) {
  MPSDevice::getInstance(); // the first use of MPS scans
  auto& shared = locked_state();
  std::lock_guard<std::mutex> lock(shared.mutex);
  return use(shared.state.selection().chosen());
}

bool get_allow_intel_gpu() {
  DeferWarnings defer;
  auto& shared = locked_state();
  std::lock_guard<std::mutex> lock(shared.mutex);
  return shared.state.allow_intel_gpu();
}

void set_allow_intel_gpu(bool allow) {
  DeferWarnings defer;
  using Change = policy::DeviceState::Change;
  auto& shared = locked_state();
  std::string error;
  Change change = Change::stored;
  {
    std::lock_guard<std::mutex> lock(shared.mutex);
    change = shared.state.set_allow_intel_gpu(allow, error);
  }
  TORCH_CHECK(change != Change::refused, error);
  if (change == Change::rescan) {
    MPSDevice::getInstance()->rescanIfUnavailable();
  }
}

std::string device_report() {
  DeferWarnings defer;
  MPSDevice::getInstance(); // counts as a use of MPS: runs the first scan
  auto& shared = locked_state();
  std::lock_guard<std::mutex> lock(shared.mutex);
  scan_if_probe_failed(shared.state);
  return policy::report_json(shared.state.selection());
}

std::string unavailable_reason() {
  DeferWarnings defer;
  return unavailableReason();
}

std::vector<std::string> take_warnings() {
  auto& shared = locked_state();
  std::lock_guard<std::mutex> lock(shared.mutex);
  return shared.state.take_warnings();
}

} // namespace

NSUInteger policyChoice(NSArray* devices) {
  auto& shared = locked_state();
  std::lock_guard<std::mutex> lock(shared.mutex);
  const auto* chosen = shared.state.scan(all_device_props(devices), line_platform(true));
  warn_queued(shared.state);
  return chosen != nullptr ? static_cast<NSUInteger>(chosen->source_index) : static_cast<NSUInteger>(NSNotFound);
}

void MPSDevice::rescanIfUnavailable() {
  // Only a scan that chose nothing is repeated (after allow_intel_gpu = True);
  // one that never ran because the macOS probe failed cannot come out otherwise.
  static std::mutex rescan_mutex;
  std::lock_guard<std::mutex> lock(rescan_mutex);
  bool scanned = false;
  {
    auto& shared = locked_state();
    std::lock_guard<std::mutex> state_lock(shared.mutex);
    scanned = shared.state.scanned();
  }
  if (_mtl_device != nil || !scanned) {
    return;
  }
  @autoreleasepool {
    NSArray* devices = [MTLCopyAllDevices() autorelease];
    const NSUInteger chosen = policyChoice(devices);
    if (chosen < [devices count]) {
      _mtl_device = [[devices objectAtIndex:chosen] retain]; // no subscripts: runs on GNUstep too
    }
  }
}

std::string unavailableReason() {
  if (MPSDevice::getInstance()->device() != nil) {
    return "";
  }
  auto& shared = locked_state();
  std::lock_guard<std::mutex> lock(shared.mutex);
  scan_if_probe_failed(shared.state);
  warn_queued(shared.state);
  return shared.state.selection().unavailable_reason;
}

int fallbackCoreCount() {
  return with_chosen([](const policy::DeviceStatus* chosen) {
    return chosen != nullptr ? static_cast<int>(policy::fallback_core_count(chosen->props)) : 0;
  });
}

bool deviceSupportsMetal4() {
  return with_chosen(
      [](const policy::DeviceStatus* chosen) { return chosen != nullptr && policy::supports_metal4(chosen->props); });
}

} // namespace at::mps

// The Python layer (torch/backends/mps/_device_policy.py, patch 0003) calls
// these as torch.ops.intelmac.mps_*; they take no tensor, so the dispatcher
// runs them whatever the device. A refused change raises RuntimeError there.
TORCH_LIBRARY(intelmac, m) {
  m.def("mps_get_allow_intel_gpu() -> bool", &at::mps::get_allow_intel_gpu);
  m.def("mps_set_allow_intel_gpu(bool allow) -> ()", &at::mps::set_allow_intel_gpu);
  m.def("mps_device_report() -> str", &at::mps::device_report);
  m.def("mps_unavailable_reason() -> str", &at::mps::unavailable_reason);
  m.def("mps_take_warnings() -> str[]", &at::mps::take_warnings);
}
