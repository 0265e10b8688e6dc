// Test driver for MPSDevicePolicy.h: reads cases from stdin, prints one JSON
// object per case on stdout. The expectations live in the Python tests; this
// program only runs the header's functions and reports what they returned.
//
// Input: tab-separated lines. Text fields are "=" + value, or "!" for unset.
//   case <id> <allow 0|1> <selector> <macos_ok 0|1> <min_macos>
//   dev <name> <low_power> <removable> <headless> <unified> <working_set> <registry_id> <mac2> <apple>
//   later <allow 0|1> <selector>      (optional: a second choice, as after a flag change)
//   end
//   envbool <id> <variable> <raw>
//   selector <id> <raw>
//   core <id> <name> <low_power>
//   metal4 <id> <apple 0|1>
//   state <id> <macos_ok 0|1> <min_macos>
//                                     a scripted run of one DeviceState, on the
//                                     devices of the dev lines that follow, with
//                                     PYTORCH_MPS_* unset at the start
//   do <op> [<arg> ...]               one step of it, in order:
//                                       scan            DeviceState::scan(devices, platform)
//                                       get             allow_intel_gpu()
//                                       report          report_json(selection()), as is
//                                       set <0|1>       set_allow_intel_gpu()
//                                       setenv <var> <raw>   setenv / unsetenv ("!")
//   done                              runs the steps; after each prints what
//                                     the state then says (selection, warnings)
#include <ATen/mps/MPSDevicePolicy.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

namespace policy = at::mps::policy;

namespace {

std::string json(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

const char* b(bool value) {
  return value ? "true" : "false";
}

std::vector<std::string> split_tabs(const std::string& line) {
  std::vector<std::string> fields;
  std::string field;
  std::istringstream in(line);
  while (std::getline(in, field, '\t')) {
    fields.push_back(field);
  }
  return fields;
}

// "=text" -> "text", "!" -> unset (nullptr).
const char* raw(const std::string& field) {
  return field.rfind('=', 0) == 0 ? field.c_str() + 1 : nullptr;
}

std::string selection_json(const policy::Selection& s) {
  std::ostringstream out;
  out << "{\"selected\": ";
  if (s.chosen()) {
    out << json(s.chosen()->props.name) << ", \"selected_registry_id\": " << s.chosen()->props.registry_id
        << ", \"selected_index\": " << *s.selected;
  } else {
    out << "null, \"selected_registry_id\": null, \"selected_index\": null";
  }
  out << ", \"reason\": " << json(s.unavailable_reason) << ", \"apple_silicon\": " << b(s.apple_silicon)
      << ", \"low_power_selected\": " << b(s.uses_low_power_gpu()) << ", \"devices\": [";
  for (std::size_t i = 0; i < s.devices.size(); ++i) {
    const auto& d = s.devices[i];
    out << (i ? ", " : "") << "{\"index\": " << d.index << ", \"source_index\": " << d.source_index
        << ", \"name\": " << json(d.props.name) << ", \"registry_id\": " << d.props.registry_id
        << ", \"eligible\": " << b(d.eligible) << ", \"selected\": " << b(d.selected)
        << ", \"skip_reason\": " << json(d.skip_reason) << "}";
  }
  out << "]}";
  return out.str();
}

struct Case {
  std::string id;
  policy::Options options;
  policy::Platform platform;
  std::vector<policy::DeviceProps> devices;
  bool has_later = false;
  policy::Options later;
};

// A scripted DeviceState run: the steps a caller such as MPSDevice.mm takes.
struct StateRun {
  std::string id;
  policy::Platform platform;
  std::vector<policy::DeviceProps> devices;
  std::vector<std::vector<std::string>> steps;
};

const char* change_name(policy::DeviceState::Change change) {
  switch (change) {
    case policy::DeviceState::Change::stored:
      return "stored";
    case policy::DeviceState::Change::rescan:
      return "rescan";
    case policy::DeviceState::Change::refused:
      return "refused";
  }
  return "?";
}

std::string strings_json(const std::vector<std::string>& items) {
  std::string out = "[";
  for (std::size_t i = 0; i < items.size(); ++i) {
    out += (i ? ", " : "") + json(items[i]);
  }
  return out + "]";
}

// Returns false on a step it does not know.
bool run_state(const StateRun& run) {
  unsetenv(policy::kAllowIntelGpuEnv);
  unsetenv(policy::kDeviceEnv);
  policy::DeviceState state;
  std::cout << "{\"id\": " << json(run.id) << ", \"steps\": [";
  for (std::size_t i = 0; i < run.steps.size(); ++i) {
    const auto& step = run.steps[i];
    std::cout << (i ? ", " : "") << "{\"op\": " << json(step[0]);
    if (step[0] == "scan" && step.size() == 1) {
      const policy::DeviceStatus* chosen = state.scan(run.devices, run.platform);
      std::cout << ", \"value\": " << (chosen ? json(chosen->props.name) : std::string("null"));
    } else if (step[0] == "report" && step.size() == 1) {
      std::cout << ", \"value\": " << policy::report_json(state.selection()); // JSON already
    } else if (step[0] == "get" && step.size() == 1) {
      std::cout << ", \"value\": " << b(state.allow_intel_gpu());
    } else if (step[0] == "set" && step.size() == 2) {
      std::string error;
      const auto change = state.set_allow_intel_gpu(step[1] == "1", error);
      std::cout << ", \"change\": \"" << change_name(change) << "\", \"error\": " << json(error);
    } else if (step[0] == "setenv" && step.size() == 3) {
      if (raw(step[2]) != nullptr) {
        setenv(step[1].c_str(), raw(step[2]), 1);
      } else {
        unsetenv(step[1].c_str());
      }
    } else {
      std::cerr << "policy_driver: unknown state step " << step[0] << "\n";
      return false;
    }
    std::cout << ", \"scanned\": " << b(state.scanned()) << ", \"selection\": " << selection_json(state.selection())
              << ", \"warnings\": " << strings_json(state.take_warnings()) << "}";
  }
  std::cout << "]}\n";
  return true;
}

void run_case(const Case& c) {
  const policy::Selection first = policy::choose(c.devices, c.options, c.platform);
  std::cout << "{\"id\": " << json(c.id) << ", \"result\": " << selection_json(first);
  if (c.has_later) {
    const policy::Selection second = policy::choose(c.devices, c.later, c.platform);
    std::cout << ", \"later\": " << selection_json(second) << ", \"same_choice\": "
              << b(policy::same_choice(first, second))
              << ", \"late_error\": " << json(policy::late_change_error(first, second, c.later.allow_intel_gpu));
  }
  if (first.uses_low_power_gpu()) {
    std::cout << ", \"warning\": " << json(policy::low_power_warning(first.chosen()->props));
  }
  std::cout << "}\n";
}

} // namespace

int main() {
  std::string line;
  Case current;
  StateRun state_run;
  bool in_state = false; // dev lines belong to state_run
  while (std::getline(std::cin, line)) {
    const auto f = split_tabs(line);
    if (f.empty()) {
      continue;
    }
    if (f[0] == "state" && f.size() == 4) {
      state_run = StateRun{};
      in_state = true;
      state_run.id = f[1];
      state_run.platform.macos_ok = f[2] == "1";
      state_run.platform.min_macos = f[3];
    } else if (f[0] == "do" && f.size() >= 2 && in_state) {
      state_run.steps.emplace_back(f.begin() + 1, f.end());
    } else if (f[0] == "done" && in_state) {
      in_state = false;
      if (!run_state(state_run)) {
        return 2;
      }
    } else if (f[0] == "case" && f.size() == 6) {
      in_state = false;
      current = Case{};
      current.id = f[1];
      current.options.allow_intel_gpu = f[2] == "1";
      current.options.selector = policy::parse_device_selector(raw(f[3]));
      current.platform.macos_ok = f[4] == "1";
      current.platform.min_macos = f[5];
    } else if (f[0] == "dev" && f.size() == 10) {
      policy::DeviceProps d;
      d.name = f[1];
      d.low_power = f[2] == "1";
      d.removable = f[3] == "1";
      d.headless = f[4] == "1";
      d.unified_memory = f[5] == "1";
      d.recommended_working_set_size = std::stoull(f[6]);
      d.registry_id = std::stoull(f[7]);
      d.supports_mac2 = f[8] == "1";
      d.apple_gpu = f[9] == "1";
      (in_state ? state_run.devices : current.devices).push_back(d);
    } else if (f[0] == "later" && f.size() == 3) {
      current.has_later = true;
      current.later.allow_intel_gpu = f[1] == "1";
      current.later.selector = policy::parse_device_selector(raw(f[2]));
    } else if (f[0] == "end") {
      run_case(current);
    } else if (f[0] == "envbool" && f.size() == 4) {
      const auto parsed = policy::parse_bool_env(f[2], raw(f[3]));
      std::cout << "{\"id\": " << json(f[1]) << ", \"value\": "
                << (parsed.value ? (*parsed.value ? "true" : "false") : "null")
                << ", \"warning\": " << json(parsed.warning) << "}\n";
    } else if (f[0] == "selector" && f.size() == 3) {
      const auto s = policy::parse_device_selector(raw(f[2]));
      const char* kind = s.kind == policy::DeviceSelector::Kind::none
          ? "none"
          : (s.kind == policy::DeviceSelector::Kind::index ? "index" : "name");
      std::cout << "{\"id\": " << json(f[1]) << ", \"kind\": \"" << kind << "\", \"index\": " << s.index
                << ", \"text\": " << json(s.text) << ", \"warning\": " << json(s.warning) << "}\n";
    } else if (f[0] == "core" && f.size() == 4) {
      policy::DeviceProps d;
      d.name = f[2];
      d.low_power = f[3] == "1";
      std::cout << "{\"id\": " << json(f[1]) << ", \"cores\": " << policy::fallback_core_count(d) << "}\n";
    } else if (f[0] == "metal4" && f.size() == 3) {
      policy::DeviceProps d;
      d.apple_gpu = f[2] == "1";
      std::cout << "{\"id\": " << json(f[1]) << ", \"metal4\": " << b(policy::supports_metal4(d)) << "}\n";
    } else {
      std::cerr << "policy_driver: cannot read line: " << line << "\n";
      return 2;
    }
  }
  return 0;
}
