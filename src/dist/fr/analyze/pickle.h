// A pickle (protocol 2) writer for the values a flight-recorder dump holds:
// dict, list, tuple, str, int, float, bool and None. PyTorch's torchfrtrace
// reads dumps only through Python's pickle.load, and no Debian package offers
// a C++ pickle writer (the one in libtorch comes with all of libtorch), so
// sinew writes the few opcodes it needs itself.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace sinew::dist::fr {

class Pickler {
 public:
  Pickler();

  void none();
  void boolean(bool v);
  void integer(int64_t v);
  void unsigned_integer(uint64_t v);
  void real(double v);
  void str(std::string_view v);

  // Containers: begin_*, then the items (for a dict: key, value, key, ...),
  // then end_*. They nest.
  void begin_dict();
  void end_dict();
  void begin_list();
  void end_list();
  void begin_tuple();
  void end_tuple();

  // Any JSON value: object -> dict, array -> list.
  void value(const nlohmann::json& j);

  // Ends the stream (STOP) and returns the bytes.
  std::string finish();

 private:
  void op(unsigned char c) { out_.push_back(static_cast<char>(c)); }
  void bytes_le(uint64_t v, int n);

  std::string out_;
};

}  // namespace sinew::dist::fr
