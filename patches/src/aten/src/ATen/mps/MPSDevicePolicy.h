// MPSDevicePolicy.h: which Metal device the MPS backend uses, and why.
// Added by the intelmac-torch patch series (0001-mps-portable-device-policy).
//
// Every decision about the MPS device lives here, in portable C++17 that uses
// only the standard library, so that it compiles and is tested on any host.
// That includes the state kept for the process (DeviceState: the flag, the
// last scan, when a rescan is due or a change refused, the one-time warnings).
// MPSDeviceSelection.mm (patch 0002) only gathers the facts about each Metal
// device into DeviceProps, holds one DeviceState under a mutex and calls it.
//
// API (namespace at::mps::policy, all inline):
//   parse_bool_env(variable, raw)    PYTORCH_MPS_ALLOW_INTEL_GPU-style flags
//   parse_device_selector(raw)       PYTORCH_MPS_DEVICE: an index or a name part
//   stable_order(devices)            the order devices() lists them in
//   choose(devices, options, platform) -> Selection
//                                    the chosen device, a status per device and,
//                                    when none is chosen, the reason
//   same_choice(a, b)                whether two selections use the same device
//   late_change_error(current, requested, allow)
//                                    the error for a change of device after first use
//   report_json(selection)           the device report as JSON, for the Python layer
//   low_power_warning(device)        the once-per-process integrated-GPU warning
//   DeviceState                      the process-wide state MPSDeviceSelection.mm keeps:
//                                    the flag, the last scan, when a change of
//                                    the flag rescans or is refused, and the
//                                    one-time warnings (see the class)
//   fallback_core_count(device)      a core count where IORegistry has none
//   supports_metal4(device)          whether Metal 4 shaders may be compiled
//
// The policy (the same on every patched release line):
//   1. Only devices passing upstream's gates are eligible: the macOS probe of
//      the MPSGraph API and Metal GPU family Mac2.
//   2. External (removable) GPUs rank before built-in discrete ones, which
//      rank before low-power (integrated Intel) ones.
//   3. A low-power GPU is used only when allowed (allow_intel_gpu) and no other
//      eligible device exists, or when PYTORCH_MPS_DEVICE picks it.
//   3a. Unified memory is not required on any line: the allocator patches
//      (0008, 0009) keep memory where Metal allows it on Intel and AMD GPUs, so
//      an AMD GPU is eligible on 2.14.1 and 2.15.0 too, where upstream's
//      allocator refused it.
//   4. The result does not depend on the order MTLCopyAllDevices() returns.
//   5. On Apple silicon the choice is upstream's: the first Mac2 device in
//      MTLCopyAllDevices() order; the options above have no effect there.
#pragma once

#include <algorithm>
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

namespace at::mps::policy {

inline constexpr const char* kAllowIntelGpuEnv = "PYTORCH_MPS_ALLOW_INTEL_GPU";
inline constexpr const char* kDeviceEnv = "PYTORCH_MPS_DEVICE";

// What MPSDevice.mm reads from one id<MTLDevice>.
struct DeviceProps {
  std::string name;                           // [device name]
  bool low_power = false;                     // [device isLowPower]: integrated Intel GPUs
  bool removable = false;                     // [device isRemovable]: eGPUs
  bool headless = false;                      // [device isHeadless]: drives no display
  bool unified_memory = false;                // [device hasUnifiedMemory]
  std::uint64_t recommended_working_set_size = 0; // bytes
  std::uint64_t registry_id = 0;              // [device registryID]: tells identical names apart
  bool supports_mac2 = false;                 // [device supportsFamily:MTLGPUFamilyMac2]
  bool apple_gpu = false;                     // [device supportsFamily:MTLGPUFamilyApple7]
};

// ---------------------------------------------------------------------------
// Options from the environment
// ---------------------------------------------------------------------------

namespace detail {

inline std::string trim(std::string_view text) {
  const auto is_space = [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; };
  std::size_t begin = 0;
  std::size_t end = text.size();
  while (begin < end && is_space(text[begin])) {
    ++begin;
  }
  while (end > begin && is_space(text[end - 1])) {
    --end;
  }
  return std::string(text.substr(begin, end - begin));
}

inline std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) {
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return out;
}

// A byte that continues a UTF-8 character (10xxxxxx), never the start of one.
inline bool utf8_continuation(char c) {
  return (static_cast<unsigned char>(c) & 0xC0) == 0x80;
}

// Whether `needle` occurs in `haystack`, any (ASCII) case, starting and ending on
// whole UTF-8 characters: a needle never matches half of a character of a name.
inline bool contains_ci(std::string_view haystack, std::string_view needle) {
  const std::string text = lower(haystack);
  const std::string part = lower(needle);
  for (std::size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) {
    const std::size_t end = at + part.size();
    const bool starts_whole = at == text.size() || !utf8_continuation(text[at]);
    const bool ends_whole = end >= text.size() || !utf8_continuation(text[end]);
    if (starts_whole && ends_whole) {
      return true;
    }
  }
  return false;
}

// Whether `word` is one of the words of `name` (runs of letters and digits), any case.
inline bool has_word(std::string_view name, std::string_view word) {
  const auto is_word_char = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; };
  std::size_t i = 0;
  while (i < name.size()) {
    std::size_t end = i;
    while (end < name.size() && is_word_char(name[end])) {
      ++end;
    }
    if (end > i && lower(name.substr(i, end - i)) == lower(word)) {
      return true;
    }
    i = end + 1;
  }
  return false;
}

inline bool all_digits(std::string_view text) {
  return !text.empty() &&
      std::all_of(text.begin(), text.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; });
}

} // namespace detail

// A boolean environment variable: 1/true/yes/on or 0/false/no/off, any case,
// surrounding blanks ignored. Unset or empty leaves `value` empty. Anything else,
// a value of blanks only included, also leaves it empty and explains why in
// `warning`, so the default applies.
struct EnvBool {
  std::optional<bool> value;
  std::string warning; // empty unless the text was not understood
};

inline EnvBool parse_bool_env(std::string_view variable, const char* raw) {
  EnvBool result;
  // Only an empty value means unset; "   " is a mistake worth a warning.
  if (raw == nullptr || *raw == '\0') {
    return result;
  }
  const std::string text = detail::lower(detail::trim(raw));
  if (text == "1" || text == "true" || text == "yes" || text == "on") {
    result.value = true;
  } else if (text == "0" || text == "false" || text == "no" || text == "off") {
    result.value = false;
  } else {
    result.warning = "Ignoring " + std::string(variable) + "='" + std::string(raw) +
        "': expected 1, true, yes or on to allow, or 0, false, no or off not to (any case); "
        "using the default (not allowed)";
  }
  return result;
}

// PYTORCH_MPS_DEVICE: all digits is an index into devices() (the stable order;
// leading zeros ignored); any other text is a case-insensitive part of a device
// name. A name that is one device's full name picks that device even when it is
// also part of a longer name. A number that is no valid index picks by name when
// it is a whole word of a name ("580" of "AMD Radeon RX 580"; "3" is no word of
// "Intel(R) UHD Graphics 630"). Unset or empty: no choice. Blanks only: no
// choice, with a warning, as for PYTORCH_MPS_ALLOW_INTEL_GPU.
struct DeviceSelector {
  enum class Kind { none, index, name };
  Kind kind = Kind::none;
  std::size_t index = 0;
  std::string text;    // as given, trimmed; for messages
  std::string warning; // empty unless the value was not understood
};

inline DeviceSelector parse_device_selector(const char* raw) {
  DeviceSelector selector;
  if (raw == nullptr) {
    return selector;
  }
  selector.text = detail::trim(raw);
  if (selector.text.empty()) {
    // Only an empty value means unset; "   " is a mistake worth a warning.
    if (*raw != '\0') {
      selector.warning = "Ignoring " + std::string(kDeviceEnv) + "='" + std::string(raw) +
          "': expected an index from torch.backends.mps.devices() or a part of one device name; "
          "using the default choice";
    }
    return selector;
  }
  if (detail::all_digits(selector.text)) {
    selector.kind = DeviceSelector::Kind::index;
    // Leading zeros first ("0000000000000000000001" is 1); then a number of 19
    // or more digits is past any index, and past what size_t holds: saturate.
    const std::size_t first = selector.text.find_first_not_of('0');
    const std::string digits = first == std::string::npos ? "0" : selector.text.substr(first);
    selector.index = digits.size() < 19 ? static_cast<std::size_t>(std::stoull(digits)) : static_cast<std::size_t>(-1);
  } else {
    selector.kind = DeviceSelector::Kind::name;
  }
  return selector;
}

struct Options {
  bool allow_intel_gpu = false;
  DeviceSelector selector;
};

// What the MPSDevice constructor learnt before looking at devices, and what
// this release line's hook in MPSDevice.h says about it (patch 0005).
struct Platform {
  bool macos_ok = true;  // upstream's MPSGraph selector probe passed
  std::string min_macos; // e.g. "14.0", for the message when it did not
};

// ---------------------------------------------------------------------------
// Ordering
// ---------------------------------------------------------------------------

// Rank of a device in the stable order (lower first). External GPUs come first
// because a user who plugs in an eGPU bought it for this work; built-in
// discrete GPUs next; low-power (integrated) ones after them, since they share
// memory bandwidth with the CPU; devices the backend cannot use at all (no
// Mac2) last, so the usable ones keep small indexes. Every input is a fixed
// property of the hardware, so indexes do not move between runs. `headless`
// is deliberately not used: it changes when a display is plugged in.
inline int tier(const DeviceProps& device) {
  if (!device.supports_mac2) {
    return 3;
  }
  if (device.low_power) {
    return 2;
  }
  return device.removable ? 0 : 1;
}

// Positions in `devices`, in the order devices() lists them: by tier, then by
// name, then by IORegistry id (two "AMD Radeon Pro Vega II" of a Mac Pro
// differ only there). Independent of the order of `devices`.
inline std::vector<std::size_t> stable_order(const std::vector<DeviceProps>& devices) {
  std::vector<std::size_t> order(devices.size());
  for (std::size_t i = 0; i < order.size(); ++i) {
    order[i] = i;
  }
  std::sort(order.begin(), order.end(), [&devices](std::size_t a, std::size_t b) {
    const DeviceProps& x = devices[a];
    const DeviceProps& y = devices[b];
    return std::make_tuple(tier(x), x.name, x.registry_id, a) < std::make_tuple(tier(y), y.name, y.registry_id, b);
  });
  return order;
}

// ---------------------------------------------------------------------------
// The choice
// ---------------------------------------------------------------------------

struct DeviceStatus {
  std::size_t index = 0;        // position in devices(), i.e. in stable_order()
  std::size_t source_index = 0; // position in the vector given to choose()
  DeviceProps props;
  bool eligible = false;        // could be used with the current options
  bool selected = false;
  std::string skip_reason;      // empty for the selected device
};

struct Selection {
  std::vector<DeviceStatus> devices; // in stable order
  std::optional<std::size_t> selected; // index into `devices`
  std::string unavailable_reason;      // empty when a device is selected
  bool apple_silicon = false;          // upstream's rule was applied

  const DeviceStatus* chosen() const {
    return selected ? &devices[*selected] : nullptr;
  }
  bool uses_low_power_gpu() const {
    return selected && devices[*selected].props.low_power;
  }
};

namespace detail {

inline std::string describe(const DeviceStatus& status) {
  return "[" + std::to_string(status.index) + "] " + status.props.name;
}

inline std::string list_devices(const std::vector<DeviceStatus>& devices) {
  std::string out;
  for (const auto& status : devices) {
    out += (out.empty() ? "" : ", ") + describe(status);
  }
  return out;
}

inline std::string kind_of_low_power(const std::vector<const DeviceStatus*>& devices) {
  const bool all_intel = std::all_of(
      devices.begin(), devices.end(), [](const DeviceStatus* d) { return contains_ci(d->props.name, "intel"); });
  return all_intel ? "Intel GPU" : "low-power GPU";
}

inline std::string opt_in_hint() {
  return std::string("set ") + kAllowIntelGpuEnv +
      "=1 or torch.backends.mps.allow_intel_gpu = True before the first use of MPS";
}

inline const char* no_mac2_reason() {
  return "does not support Metal GPU family Mac2, which the MPS backend needs";
}

inline std::string selector_text(const DeviceSelector& selector) {
  return std::string(kDeviceEnv) + "='" + selector.text + "'";
}

// Upstream's rule, for Apple silicon: the first Mac2 device in the order Metal gave.
inline void choose_like_upstream(Selection& selection) {
  std::optional<std::size_t> first;
  for (std::size_t i = 0; i < selection.devices.size(); ++i) {
    const DeviceStatus& status = selection.devices[i];
    if (status.props.supports_mac2 && (!first || status.source_index < selection.devices[*first].source_index)) {
      first = i;
    }
  }
  for (auto& status : selection.devices) {
    status.eligible = status.props.supports_mac2;
    if (!status.props.supports_mac2) {
      status.skip_reason = no_mac2_reason();
    } else if (!first || &status != &selection.devices[*first]) {
      status.skip_reason = "on Apple silicon the first Metal device is used, as upstream PyTorch does";
    }
  }
  if (first) {
    selection.selected = first;
    selection.devices[*first].selected = true;
  } else {
    selection.unavailable_reason = "no Metal device supports GPU family Mac2, which the MPS backend needs: " +
        list_devices(selection.devices);
  }
}

// PYTORCH_MPS_DEVICE: returns the index picked, or explains in `reason` why none.
inline std::optional<std::size_t> pick(const std::vector<DeviceStatus>& devices, const DeviceSelector& selector,
                                      std::string& reason) {
  const std::string all = "; the Metal devices are: " + (devices.empty() ? std::string("none") : list_devices(devices));
  if (selector.kind == DeviceSelector::Kind::index && selector.index < devices.size()) {
    return selector.index;
  }
  // A name part; or a number past the end that is a word of a name, such as 580
  // of "AMD Radeon RX 580" (an index in range always means the index).
  const bool number = selector.kind == DeviceSelector::Kind::index;
  std::vector<std::size_t> matches;
  std::vector<std::size_t> exact;
  for (std::size_t i = 0; i < devices.size(); ++i) {
    const std::string& name = devices[i].props.name;
    if (number ? has_word(name, selector.text) : contains_ci(name, selector.text)) {
      matches.push_back(i);
      if (lower(devices[i].props.name) == lower(selector.text)) {
        exact.push_back(i);
      }
    }
  }
  // A full name that is also part of a longer one still picks the device it names.
  if (matches.size() > 1 && exact.size() == 1) {
    return exact.front();
  }
  if (matches.size() == 1) {
    return matches.front();
  }
  if (matches.empty() && number) {
    reason = selector_text(selector) + " is out of range: there " +
        (devices.size() == 1 ? std::string("is 1 Metal device") : "are " + std::to_string(devices.size()) + " Metal devices") +
        all + "; set it to an index from that list, or pick by name with a part of one name (a number picks by "
        "name only when it is a whole word of one name, such as 580 in 'AMD Radeon RX 580')";
  } else if (matches.empty()) {
    reason = selector_text(selector) + " matches no Metal device name" + all +
        "; set it to an index or to a part of one name";
  } else {
    std::vector<DeviceStatus> matched;
    for (std::size_t i : matches) {
      matched.push_back(devices[i]);
    }
    // Say which devices matched; list the others too when there are any, for their indexes.
    reason = selector_text(selector) + " is ambiguous: it matches " + std::to_string(matches.size()) +
        " devices (" + list_devices(matched) + ")" + (matches.size() < devices.size() ? all : std::string()) +
        "; set it to an index or to a longer part of one name";
  }
  return std::nullopt;
}

} // namespace detail

inline Selection choose(const std::vector<DeviceProps>& devices, const Options& options, const Platform& platform) {
  Selection selection;
  const std::vector<std::size_t> order = stable_order(devices);
  for (std::size_t i = 0; i < order.size(); ++i) {
    DeviceStatus status;
    status.index = i;
    status.source_index = order[i];
    status.props = devices[order[i]];
    selection.devices.push_back(status);
  }
  auto& all = selection.devices;

  if (!platform.macos_ok) {
    const std::string why = "the MPS backend of this PyTorch needs macOS " +
        (platform.min_macos.empty() ? std::string("of a newer version") : platform.min_macos + " or newer") +
        " (the MPSGraph API it uses is missing); check the version with `sw_vers`";
    for (auto& status : all) {
      status.skip_reason = why;
    }
    selection.unavailable_reason = why;
    return selection;
  }
  if (all.empty()) {
    selection.unavailable_reason =
        "no Metal device was found (MTLCopyAllDevices() returned none; virtual machines without GPU "
        "access and some non-GUI sessions see no device)";
    return selection;
  }
  selection.apple_silicon =
      std::any_of(all.begin(), all.end(), [](const DeviceStatus& s) { return s.props.apple_gpu; });
  if (selection.apple_silicon) {
    detail::choose_like_upstream(selection);
    return selection;
  }

  for (auto& status : all) {
    status.eligible = status.props.supports_mac2 && (!status.props.low_power || options.allow_intel_gpu);
  }

  if (options.selector.kind != DeviceSelector::Kind::none) {
    std::string reason;
    const auto picked = detail::pick(all, options.selector, reason);
    if (picked && !all[*picked].props.supports_mac2) {
      reason = detail::selector_text(options.selector) + " picks " + detail::describe(all[*picked]) + ", which " +
          detail::no_mac2_reason() + "; the Metal devices are: " + detail::list_devices(all);
    } else if (picked) {
      // Picking a low-power GPU by name or index is an explicit opt-in.
      all[*picked].eligible = true;
      selection.selected = picked;
    }
    for (std::size_t i = 0; i < all.size(); ++i) {
      if (selection.selected && i == *selection.selected) {
        continue;
      }
      if (!all[i].props.supports_mac2) {
        all[i].skip_reason = detail::no_mac2_reason();
      } else if (picked) {
        all[i].skip_reason = detail::selector_text(options.selector) + " picks " + detail::describe(all[*picked]);
      } else {
        all[i].skip_reason = detail::selector_text(options.selector) + " does not pick exactly one usable device";
      }
    }
    if (!selection.selected) {
      selection.unavailable_reason = reason;
    }
  } else {
    // Tiers already put external and discrete GPUs first, so the best candidate
    // is the first eligible device in stable order.
    std::optional<std::size_t> best;
    for (std::size_t i = 0; i < all.size() && !best; ++i) {
      if (all[i].eligible) {
        best = i;
      }
    }
    std::vector<const DeviceStatus*> blocked_low_power;
    for (std::size_t i = 0; i < all.size(); ++i) {
      DeviceStatus& status = all[i];
      if (best && i == *best) {
        continue;
      }
      if (!status.props.supports_mac2) {
        status.skip_reason = detail::no_mac2_reason();
      } else if (status.props.low_power && !options.allow_intel_gpu) {
        status.skip_reason = "low-power (integrated) GPU, not used unless allowed: " + detail::opt_in_hint();
        blocked_low_power.push_back(&status);
      } else if (best) {
        status.skip_reason = "ranked after " + detail::describe(all[*best]) +
            " (external GPUs first, then built-in discrete ones, then low-power ones)";
      }
    }
    selection.selected = best;
    if (!best) {
      std::string names; // of the low-power GPUs not allowed
      for (const DeviceStatus* status : blocked_low_power) {
        names += (names.empty() ? "" : ", ") + status->props.name;
      }
      const bool one = blocked_low_power.size() == 1;
      const std::string opt_in =
          detail::opt_in_hint() + " (integrated GPUs can be slower than the CPU for small workloads)";
      if (!blocked_low_power.empty()) {
        selection.unavailable_reason = std::string("only ") + (one ? "an " : "") +
            detail::kind_of_low_power(blocked_low_power) + (one ? "" : "s") + " (" + names + ") " +
            (one ? "was" : "were") + " found; " + opt_in;
      } else {
        selection.unavailable_reason =
            "no Metal device supports GPU family Mac2, which the MPS backend needs: " + detail::list_devices(all);
      }
    }
  }
  if (selection.selected) {
    all[*selection.selected].selected = true;
  }
  return selection;
}

// Whether two selections run on the same device (compared by IORegistry id and
// name, which survive a rescan; positions may not).
inline bool same_choice(const Selection& a, const Selection& b) {
  const DeviceStatus* x = a.chosen();
  const DeviceStatus* y = b.chosen();
  if (x == nullptr || y == nullptr) {
    return x == y;
  }
  return x->props.registry_id == y->props.registry_id && x->props.name == y->props.name;
}

// The error for setting allow_intel_gpu to `allow` after the device was
// created, when that would choose another device: the Metal device, its
// allocator and streams live for the rest of the process. It names the one
// thing that changed, the flag; the environment is read once, at the first
// scan, so a later change of it changes nothing.
inline std::string late_change_error(const Selection& current, const Selection& requested, bool allow) {
  const auto name = [](const Selection& s) {
    return s.chosen() ? "'" + s.chosen()->props.name + "'" : std::string("no device");
  };
  return "The MPS device is already in use (" + name(current) + "); torch.backends.mps.allow_intel_gpu = " +
      (allow ? "True" : "False") + " would select " + name(requested) + " instead. Set " + kAllowIntelGpuEnv +
      " in the environment, or torch.backends.mps.allow_intel_gpu, before the first use of MPS";
}

namespace detail {

// A JSON string literal (RFC 8259): quotes, backslashes and control characters
// escaped; other bytes, UTF-8 included, pass through.
inline std::string json_string(std::string_view text) {
  static const char* const hex = "0123456789abcdef";
  std::string out = "\"";
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (byte < 0x20) {
      out += "\\u00";
      out += hex[byte >> 4];
      out += hex[byte & 0xf];
    } else {
      out += c;
    }
  }
  return out + "\"";
}

} // namespace detail

// The device report that torch.backends.mps.devices() reads, as a JSON array:
// one object per device in stable order, with the fields of MPSDeviceInfo
// (skip_reason null for the selected device). Passing one string keeps the
// operator schema that carries it simple.
inline std::string report_json(const Selection& selection) {
  const auto flag = [](bool value) { return value ? std::string("true") : std::string("false"); };
  std::string out = "[";
  for (const DeviceStatus& status : selection.devices) {
    out += (out.size() > 1 ? ", " : "");
    out += "{\"index\": " + std::to_string(status.index) + ", \"name\": " + detail::json_string(status.props.name) +
        ", \"low_power\": " + flag(status.props.low_power) + ", \"removable\": " + flag(status.props.removable) +
        ", \"headless\": " + flag(status.props.headless) + ", \"unified_memory\": " +
        flag(status.props.unified_memory) + ", \"recommended_working_set_size\": " +
        std::to_string(status.props.recommended_working_set_size) + ", \"eligible\": " + flag(status.eligible) +
        ", \"selected\": " + flag(status.selected) + ", \"skip_reason\": " +
        (status.skip_reason.empty() ? std::string("null") : detail::json_string(status.skip_reason)) + "}";
  }
  return out + "]";
}

inline std::string low_power_warning(const DeviceProps& device) {
  return "MPS is running on the integrated GPU '" + device.name +
      "'. Integrated GPUs can be slower than the CPU for small workloads and share memory bandwidth with it; "
      "measure your workload first (intelmac-torch ships a CPU-vs-MPS benchmark: `make bench DEVICE=mps`).";
}

// ---------------------------------------------------------------------------
// The process-wide state
// ---------------------------------------------------------------------------

// What MPSDevice.mm keeps between calls, and every rule about it. MPSDevice.mm
// owns one instance for the process, guards it with a mutex, hands it the
// properties of the Metal devices and raises with TORCH_WARN what
// take_warnings() returns; the class itself takes no lock and throws nothing.
class DeviceState {
 public:
  // What set_allow_intel_gpu() did with the new value.
  enum class Change {
    stored,  // kept; nothing to scan: no scan yet, or the device in use stays
    rescan,  // kept; the last scan chose nothing, so scan() again now
    refused, // not kept: it would change the device in use; `error` says so
  };

  // The value set through set_allow_intel_gpu(), else PYTORCH_MPS_ALLOW_INTEL_GPU.
  bool allow_intel_gpu() {
    read_environment();
    return allow_intel_gpu_.value_or(allow_from_env_);
  }

  // The options a scan uses now: the flag above and PYTORCH_MPS_DEVICE as it
  // was first read.
  Options options() {
    read_environment();
    Options options;
    options.allow_intel_gpu = allow_intel_gpu();
    options.selector = selector_;
    return options;
  }

  // Chooses among `devices` (in MTLCopyAllDevices() order) and keeps the result;
  // returns the chosen device's status, or nullptr. Only a scan on a macOS that
  // passed upstream's probe counts: after one that did not, scanned() stays
  // false and the selection only explains that. The first scan that counts warns
  // about devices without Mac2, as upstream does; choosing a low-power GPU
  // warns once per process, however often the devices are scanned.
  const DeviceStatus* scan(std::vector<DeviceProps> devices, const Platform& platform) {
    Selection next = choose(devices, options(), platform);
    if (platform.macos_ok && !scanned_) {
      for (const DeviceStatus& status : next.devices) {
        if (!status.props.supports_mac2) {
          warnings_.push_back("Skipping device " + status.props.name + " that does not support Metal 2.0");
        }
      }
    }
    scanned_ = scanned_ || platform.macos_ok;
    devices_ = std::move(devices);
    platform_ = platform;
    selection_ = std::move(next);
    const DeviceStatus* chosen = selection_.chosen();
    if (chosen != nullptr && chosen->props.low_power && !warned_low_power_) {
      warned_low_power_ = true;
      warnings_.push_back(low_power_warning(chosen->props));
    }
    return chosen;
  }

  // torch.backends.mps.allow_intel_gpu = allow. While a device is in use, a
  // value that would choose another device is refused (the flag keeps its
  // value, `error` gets late_change_error()); one that would not is kept and
  // the report updated. A scan that chose nothing does not count as a device in
  // use: the value is kept and the caller scans again. Before the first scan
  // the value is only kept; the first scan reads it. Setting the value the flag
  // already has changes nothing and is never refused.
  Change set_allow_intel_gpu(bool allow, std::string& error) {
    if (allow == allow_intel_gpu()) {
      allow_intel_gpu_ = allow; // the same value: nothing to choose again
      return Change::stored;
    }
    if (scanned_ && selection_.chosen() != nullptr) {
      Options requested = options();
      requested.allow_intel_gpu = allow;
      Selection next = choose(devices_, requested, platform_);
      if (!same_choice(selection_, next)) {
        error = late_change_error(selection_, next, allow);
        return Change::refused;
      }
      selection_ = std::move(next);
      allow_intel_gpu_ = allow;
      return Change::stored;
    }
    allow_intel_gpu_ = allow;
    return scanned_ ? Change::rescan : Change::stored;
  }

  // The result of the last scan: every device's status and, when none was
  // chosen, the reason. Empty before any scan.
  const Selection& selection() const {
    return selection_;
  }

  // Whether the devices were scanned on a macOS that passed upstream's probe.
  bool scanned() const {
    return scanned_;
  }

  // The warnings queued since the last call, oldest first.
  std::vector<std::string> take_warnings() {
    std::vector<std::string> out;
    out.swap(warnings_);
    return out;
  }

 private:
  // PYTORCH_MPS_ALLOW_INTEL_GPU and PYTORCH_MPS_DEVICE, read together once (at
  // the first scan or the first question about the flag, whichever comes
  // first) and kept: a later change of the environment changes nothing, so a
  // refusal can only ever be about the flag. A value of either that is not
  // understood (blanks only included) is warned about then, once.
  void read_environment() {
    if (environment_read_) {
      return;
    }
    environment_read_ = true;
    const EnvBool parsed = parse_bool_env(kAllowIntelGpuEnv, std::getenv(kAllowIntelGpuEnv));
    if (!parsed.warning.empty()) {
      warnings_.push_back(parsed.warning);
    }
    allow_from_env_ = parsed.value.value_or(false);
    selector_ = parse_device_selector(std::getenv(kDeviceEnv));
    if (!selector_.warning.empty()) {
      warnings_.push_back(selector_.warning);
    }
  }

  bool environment_read_ = false;
  bool allow_from_env_ = false;         // PYTORCH_MPS_ALLOW_INTEL_GPU as read
  DeviceSelector selector_;             // PYTORCH_MPS_DEVICE as read
  std::optional<bool> allow_intel_gpu_; // once set through set_allow_intel_gpu()
  bool scanned_ = false;
  std::vector<DeviceProps> devices_;   // what the last scan read, for set_allow_intel_gpu()
  Platform platform_;
  Selection selection_;
  bool warned_low_power_ = false;
  std::vector<std::string> warnings_;
};

// ---------------------------------------------------------------------------
// Non-Apple GPUs
// ---------------------------------------------------------------------------

// Upstream's getCoreCount() reads "gpu-core-count" from AGXAccelerator entries
// of the IORegistry, which only Apple GPUs have; elsewhere it returns 0 and
// kernels sized by it misbehave. The closest thing to an Apple GPU core (a
// unit that runs threadgroups independently) is an Intel sub-slice of 8
// execution units and an AMD compute unit, so this returns those counts from
// the marketing name (Intel: EUs / 8; AMD: CUs), and otherwise a conservative
// guess: 3 for an integrated GPU (a 24-EU UHD 630), 8 for anything else.
inline unsigned fallback_core_count(const DeviceProps& device) {
  struct Known {
    const char* name_part;
    unsigned cores;
  };
  // Longer names first: the first match wins.
  static const Known known[] = {
      // Intel (EUs / 8)
      {"iris(tm) plus graphics 655", 6}, // 48 EU, MacBook Pro 13" 2018-2019
      {"iris(tm) plus graphics 645", 6}, // 48 EU
      {"iris(tm) plus graphics 650", 6}, // 48 EU
      {"iris(tm) plus graphics 640", 6}, // 48 EU
      {"iris(tm) plus graphics", 8},     // Ice Lake G7, 64 EU, MacBook Air 2020 / MBP 13" 2020
      {"iris(tm) graphics 6100", 6},     // 48 EU
      {"iris(tm) graphics 550", 6},      // 48 EU
      {"iris(tm) graphics 540", 6},      // 48 EU
      {"iris pro", 5},                   // 40 EU (5200) / 48 EU (6200): take the smaller
      {"uhd graphics 630", 3},           // 24 EU
      {"uhd graphics 617", 3},           // 24 EU
      {"hd graphics 630", 3},            // 24 EU
      {"hd graphics 615", 3},            // 24 EU
      {"hd graphics 6000", 6},           // 48 EU
      // AMD (compute units)
      {"vega ii duo", 64},
      {"vega ii", 64},
      {"vega 64x", 64},
      {"vega 64", 64},
      {"vega 56", 56},
      {"vega 48", 48},
      {"vega 20", 20},
      {"vega 16", 16},
      {"w6900x", 80},
      {"w6800x", 60},
      {"w6600x", 32},
      {"w5700x", 40},
      {"w5500x", 24},
      {"5700 xt", 40},
      {"5700", 36},
      {"5600m", 40},
      {"5500m", 24},
      {"5500 xt", 22},
      {"5300m", 20},
      {"5300", 20},
      {"6900 xt", 80},
      {"6800 xt", 72},
      {"6800", 60},
      {"6600 xt", 32},
      {"6600m", 28},
      {"6600", 28},
      {"580x", 36},
      {"rx 580", 36},
      {"575x", 32},
      {"rx 570", 32},
      {"570x", 28},
      {"560x", 16},
      {"555x", 12},
      {"pro 580", 36},
      {"pro 575", 36},
      {"pro 570", 32},
      {"pro 560", 16},
      {"pro 555", 12},
      {"pro 460", 16},
      {"pro 455", 12},
      {"pro 450", 10},
  };
  for (const Known& entry : known) {
    if (detail::contains_ci(device.name, entry.name_part)) {
      return entry.cores;
    }
  }
  return device.low_power ? 3U : 8U;
}

// Metal 4 (MSL 4.0) needs an Apple GPU (Apple7 / M1 or newer). Upstream lines
// that pick the Metal language version by macOS version alone would ask an
// Intel or AMD GPU on macOS 26 for 4.0, which it cannot compile; those stay on
// 3.2 (macOS 15 and later) instead.
//
// Known limitations of Intel and AMD GPUs that no device choice fixes (the
// user documentation lists them too):
//   - bfloat16 is not assumed either way: pytorch/pytorch#141864 ran torch
//     2.2.2, which has no MPS bfloat16 on any GPU; the regression suite probes it.
//   - simdgroup_matrix is missing on Intel Mac GPUs, so kernels built on it
//     (some matmul paths) are not available there.
//   - Wrong results reported on AMD GPUs: F.linear on RDNA2
//     (pytorch/pytorch#178697) and argmax (pytorch/pytorch#112186); NaNs in
//     conv1d / mm on an Intel iMac (pytorch/pytorch#84138).
inline bool supports_metal4(const DeviceProps& device) {
  return device.apple_gpu;
}

} // namespace at::mps::policy
