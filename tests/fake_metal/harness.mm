// harness.mm: C entry points into a line's MPS device code for tests/fake_metal. They stand
// in for torch._C's MPS bindings (_mps_is_available and friends), which a CPU build of
// torch lacks; like upstream's bindings they run the code and let TORCH_WARN reach the
// caller, here queued in C++ and read by the test (intelmac_test_take_warnings).
#include <ATen/mps/MPSDevice.h>
#if INTELMAC_TEST_DEFINES_ALLOCATOR
#include <ATen/mps/MPSAllocatorInterface.h>
#endif
#include <c10/util/Exception.h>

#include <mutex>
#include <string>

#if INTELMAC_TEST_DEFINES_ALLOCATOR
namespace at::mps {
// 2.6.0's exact MPSDevice.mm defines GetMPSAllocator(), which calls this; the allocator is
// not part of these builds.
IMPSAllocator* getIMPSAllocator(bool) {
  return nullptr;
}
} // namespace at::mps
#endif

namespace {

// Collects TORCH_WARN while a test entry point runs, as torch's PyWarningHandler does for
// upstream's bindings.
struct Collect : c10::WarningHandler {
  std::string text;
  void process(const c10::Warning& warning) override {
    text += (text.empty() ? "" : "\x1e") + warning.msg();
  }
};

std::mutex warnings_mutex;
std::string warnings;

template <typename F>
auto collecting(F&& run) {
  Collect collect;
  c10::WarningUtils::WarningHandlerGuard guard(&collect);
  struct Flush {
    Collect& c;
    ~Flush() {
      std::lock_guard<std::mutex> lock(warnings_mutex);
      if (!c.text.empty()) {
        warnings += (warnings.empty() ? "" : "\x1e") + c.text;
      }
    }
  } flush{collect};
  @autoreleasepool {
    return run();
  }
}

} // namespace

extern "C" {

int intelmac_test_is_available() {
  return collecting([] { return at::mps::is_available() ? 1 : 0; });
}

// The registry id of the device MPSDevice retained; 0 when none.
unsigned long long intelmac_test_retained_registry_id() {
  return collecting([] {
    id<MTLDevice> device = at::mps::MPSDevice::getInstance()->device();
    return device != nil ? static_cast<unsigned long long>([device registryID]) : 0ULL;
  });
}

// getCoreCount() on lines that have it (2.9.1 on); -1 elsewhere.
long intelmac_test_core_count() {
#if INTELMAC_TEST_HAS_CORE_COUNT
  return collecting([] { return static_cast<long>(at::mps::MPSDevice::getInstance()->getCoreCount()); });
#else
  return -1;
#endif
}

// The warnings raised by the calls above since the last call, separated by \x1e.
const char* intelmac_test_take_warnings() {
  static std::string out;
  std::lock_guard<std::mutex> lock(warnings_mutex);
  out.swap(warnings);
  warnings.clear();
  return out.c_str();
}

} // extern "C"
