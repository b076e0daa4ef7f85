// core: error taxonomy, checks, logging, env tunables.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>

#include "sinew/core/check.h"
#include "sinew/core/env.h"
#include "sinew/core/error.h"
#include "sinew/core/log.h"

namespace sinew {
namespace {

using ::testing::HasSubstr;

TEST(Errors, TaxonomyAndRecoverability) {
  EXPECT_TRUE(is_recoverable(ErrorCode::kPeerLost));
  EXPECT_TRUE(is_recoverable(ErrorCode::kTimeout));
  EXPECT_TRUE(is_recoverable(ErrorCode::kAborted));
  EXPECT_TRUE(is_recoverable(ErrorCode::kIoError));
  EXPECT_FALSE(is_recoverable(ErrorCode::kInvalidArgument));
  EXPECT_FALSE(is_recoverable(ErrorCode::kInternal));
  try {
    throw_error(ErrorCode::kPeerLost, "rank 3 died", {3});
  } catch (const PeerLostError& e) {
    EXPECT_EQ(e.ranks(), std::vector<int>{3});
    EXPECT_TRUE(e.recoverable());
  }
  EXPECT_THROW(throw_error(ErrorCode::kTimeout, "x"), TimeoutError);
  EXPECT_THROW(throw_error(ErrorCode::kAborted, "x"), AbortedError);
  EXPECT_THROW(throw_error(ErrorCode::kIoError, "x"), IoError);
  EXPECT_THROW(throw_error(ErrorCode::kInvalidArgument, "x"), InvalidArgument);
  EXPECT_THROW(throw_error(ErrorCode::kInternal, "x"), InternalError);
}

TEST(Errors, InvalidArgumentNamesArgumentValueAndExpectation) {
  auto e = InvalidArgument::make("root", "9", "a rank in [0, 4)");
  EXPECT_STREQ(e.what(), "invalid argument 'root': got 9, expected a rank in [0, 4)");
}

TEST(Errors, StatusRoundTripsThroughExceptions) {
  Status s;
  try {
    throw PeerLostError("gone", {1, 2});
  } catch (...) {
    s = Status::from_current_exception();
  }
  EXPECT_EQ(s.code(), ErrorCode::kPeerLost);
  EXPECT_EQ(s.ranks(), (std::vector<int>{1, 2}));
  EXPECT_THROW(s.throw_if_error(), PeerLostError);
  EXPECT_NO_THROW(Status::ok().throw_if_error());
  EXPECT_EQ(Status(ErrorCode::kTimeout, "late").to_string(), "Timeout: late");
}

TEST(Checks, PrintBothOperands) {
  int a = 3, b = 5;
  try {
    SINEW_CHECK_EQ(a, b);
    FAIL();
  } catch (const InternalError& e) {
    EXPECT_THAT(e.what(), HasSubstr("a (3) != b (5)"));
  }
  try {
    SINEW_ARG_CHECK(a > b, "count", a, "more than 5");
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("'count': got 3, expected more than 5"));
  }
}

TEST(Logging, LevelSubsystemPrefixAndSink) {
  std::vector<LogRecord> got;
  set_log_sink([&](const LogRecord& r) { got.push_back(r); });
  setenv("SINEW_LOG_LEVEL", "info", 1);
  setenv("SINEW_LOG_SUBSYS", "COLL,STORE", 1);
  reload_log_config();
  set_log_rank(5);
  SINEW_INFO(kColl, "hello {}", 42);
  SINEW_DEBUG(kColl, "too verbose");
  SINEW_INFO(kShm, "filtered subsystem");
  SINEW_WARN(kStore, "warned");
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].message, "hello 42");
  EXPECT_THAT(got[0].prefix, ::testing::EndsWith(":5]"));
  EXPECT_EQ(got[1].level, LogLevel::kWarn);
  setenv("SINEW_LOG_SUBSYS", "^COLL", 1);
  reload_log_config();
  EXPECT_FALSE(log_enabled(LogLevel::kInfo, LogSubsys::kColl));
  EXPECT_TRUE(log_enabled(LogLevel::kInfo, LogSubsys::kShm));
  unsetenv("SINEW_LOG_LEVEL");
  unsetenv("SINEW_LOG_SUBSYS");
  reload_log_config();
  set_log_sink(nullptr);
  set_log_rank(-1);
}

TEST(Env, TypedCachedGetters) {
  setenv("SINEW_TEST_INT", "4K", 1);
  setenv("SINEW_TEST_BOOL", "yes", 1);
  setenv("SINEW_TEST_BAD", "12abc", 1);
  static const EnvParam<int64_t> i{"SINEW_TEST_INT", 7, "test"};
  static const EnvParam<bool> b{"SINEW_TEST_BOOL", false, "test"};
  static const EnvParam<int64_t> bad{"SINEW_TEST_BAD", 1, "test"};
  static const EnvParam<double> unset{"SINEW_TEST_UNSET", 2.5, "test"};
  EXPECT_EQ(i.get(), 4096);
  setenv("SINEW_TEST_INT", "1", 1);
  EXPECT_EQ(i.get(), 4096) << "cached after first read";
  EXPECT_TRUE(b.get());
  EXPECT_EQ(unset.get(), 2.5);
  try {
    bad.get();
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("SINEW_TEST_BAD"));
    EXPECT_THAT(e.what(), HasSubstr("12abc"));
  }
  bool listed = false;
  for (const auto& p : all_env_params()) listed |= p.name == "SINEW_TEST_INT";
  EXPECT_TRUE(listed);
}

}  // namespace
}  // namespace sinew
