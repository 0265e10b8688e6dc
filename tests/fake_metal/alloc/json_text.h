// json_text.h: a JSON string of a C++ string, for the harnesses in this folder that print
// their results as JSON (whole_stand_ins.mm, guard_streams.mm).
#pragma once

#include <string>

namespace intelmac_test {

// `text` as a JSON string: quotes and backslashes escaped, newlines as \n, other control
// characters dropped (the messages the harnesses quote have none that matter).
inline std::string quoted(const std::string& text) {
  std::string q = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') {
      q += '\\';
      q += c;
    } else if (c == '\n') {
      q += "\\n";
    } else if (static_cast<unsigned char>(c) >= 0x20) {
      q += c;
    }
  }
  return q + "\"";
}

} // namespace intelmac_test
