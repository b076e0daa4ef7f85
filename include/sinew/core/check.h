// Invariant checks that print both operands: "a (3) != b (5)".
// SINEW_CHECK* throw InternalError (a bug in sinew); argument validation uses
// SINEW_ARG_CHECK, which throws InvalidArgument (a user error).
#pragma once

#include <fmt/format.h>

#include <sstream>
#include <string>

#include "sinew/core/error.h"

namespace sinew::detail {

template <class T>
std::string check_repr(const T& v) {
  if constexpr (fmt::is_formattable<T>::value) {
    return fmt::format("{}", v);
  } else {
    std::ostringstream os;
    os << v;
    return os.str();
  }
}

[[noreturn]] void check_failed(const char* file, int line, const std::string& what);

template <class A, class B>
[[noreturn]] void check_op_failed(const char* file, int line, const char* ea, const char* op,
                                  const char* eb, const A& a, const B& b) {
  check_failed(file, line,
               fmt::format("{} ({}) {} {} ({})", ea, check_repr(a), op, eb, check_repr(b)));
}

}  // namespace sinew::detail

#define SINEW_CHECK(cond)                                                       \
  do {                                                                          \
    if (!(cond)) ::sinew::detail::check_failed(__FILE__, __LINE__, "check failed: " #cond); \
  } while (0)

#define SINEW_CHECK_OP_(a, b, op, nop)                                          \
  do {                                                                          \
    const auto& sinew_a_ = (a);                                                 \
    const auto& sinew_b_ = (b);                                                 \
    if (!(sinew_a_ op sinew_b_))                                                \
      ::sinew::detail::check_op_failed(__FILE__, __LINE__, #a, nop, #b, sinew_a_, sinew_b_); \
  } while (0)

#define SINEW_CHECK_EQ(a, b) SINEW_CHECK_OP_(a, b, ==, "!=")
#define SINEW_CHECK_NE(a, b) SINEW_CHECK_OP_(a, b, !=, "==")
#define SINEW_CHECK_LT(a, b) SINEW_CHECK_OP_(a, b, <, ">=")
#define SINEW_CHECK_LE(a, b) SINEW_CHECK_OP_(a, b, <=, ">")
#define SINEW_CHECK_GT(a, b) SINEW_CHECK_OP_(a, b, >, "<=")
#define SINEW_CHECK_GE(a, b) SINEW_CHECK_OP_(a, b, >=, "<")

// Throws InvalidArgument naming the argument, the value and what was expected.
#define SINEW_ARG_CHECK(cond, argument, value, expected)                        \
  do {                                                                          \
    if (!(cond))                                                                \
      throw ::sinew::InvalidArgument::make((argument), ::sinew::detail::check_repr(value), \
                                           (expected));                         \
  } while (0)
