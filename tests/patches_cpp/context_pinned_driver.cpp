// Runs 2.9.1's at::Context::getPinnedMemoryAllocator as patch 0012 leaves it (cut from the
// patched ATen/Context.h at test time, included below) against stand-ins: one hooks object
// whose pinned allocator is null (an AMD GPU) or not, and a current accelerator of our
// choice. Only the names the function uses are stood in; TORCH_CHECK throws as c10's does.
//
// usage: context_pinned_driver ACCELERATOR(mps|cuda|none) HOOKS(null|allocator) [ASKED(mps|cuda)]
// prints "allocator", "null" or "error: <message>".
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>

namespace c10 {
enum class DeviceType : int8_t { CPU = 0, CUDA = 1, MPS = 13 };
struct Allocator {};
struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};
template <typename... Parts>
std::string str(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}
} // namespace c10

#define TORCH_CHECK(cond, ...)                        \
  do {                                                \
    if (!(cond)) {                                    \
      throw ::c10::Error(::c10::str(__VA_ARGS__));    \
    }                                                 \
  } while (false)

namespace at {
using c10::Allocator;
constexpr c10::DeviceType kCPU = c10::DeviceType::CPU;
constexpr c10::DeviceType kCUDA = c10::DeviceType::CUDA;
constexpr c10::DeviceType kMPS = c10::DeviceType::MPS;

std::optional<c10::DeviceType> current_accelerator;
std::optional<c10::DeviceType> getAccelerator(bool = false) {
  return current_accelerator;
}

struct Hooks {
  Allocator* pinned = nullptr;
  Allocator* getPinnedMemoryAllocator() const {
    return pinned;
  }
};
Hooks hooks;

struct Context {
  const Hooks& getAcceleratorHooksInterface(std::optional<c10::DeviceType> = std::nullopt) {
    return hooks;
  }
  void lazyInitDevice(c10::DeviceType) {}
#include "context_pinned_memory.inc"
};
} // namespace at

namespace {
std::optional<c10::DeviceType> device_named(const char* name) {
  if (std::strcmp(name, "mps") == 0) return at::kMPS;
  if (std::strcmp(name, "cuda") == 0) return at::kCUDA;
  return std::nullopt;
}
} // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s ACCELERATOR HOOKS [ASKED]\n", argv[0]);
    return 2;
  }
  at::current_accelerator = device_named(argv[1]);
  static c10::Allocator allocator;
  at::hooks.pinned = std::strcmp(argv[2], "allocator") == 0 ? &allocator : nullptr;
  std::optional<c10::DeviceType> asked = argc > 3 ? device_named(argv[3]) : std::nullopt;
  at::Context context;
  try {
    c10::Allocator* got = context.getPinnedMemoryAllocator(asked);
    std::printf("%s\n", got == &allocator ? "allocator" : got == nullptr ? "null" : "other");
  } catch (const c10::Error& e) {
    std::printf("error: %s\n", e.what());
  }
  return 0;
}
