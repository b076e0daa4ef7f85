// The key-value store ranks rendezvous through (torch.distributed.Store's
// contract). Every blocking call has a deadline: the store's timeout unless
// the call gives one. Values are bytes.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sinew/core/deadline.h"

namespace sinew::dist {

using Bytes = std::vector<uint8_t>;

inline Bytes to_bytes(std::string_view s) { return Bytes(s.begin(), s.end()); }
inline std::string to_string(const Bytes& b) { return std::string(b.begin(), b.end()); }

class Store {
 public:
  static constexpr Millis kDefaultTimeout{300'000};

  virtual ~Store() = default;

  virtual void set(const std::string& key, const Bytes& value) = 0;
  // Waits for the key until the store timeout; TimeoutError names the key.
  virtual Bytes get(const std::string& key) = 0;
  // Adds to an integer counter (created as 0) and returns the new value.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // Sets `desired` if the current value equals `expected` (a missing key
  // matches an empty `expected`); returns the value now stored.
  virtual Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) = 0;
  // Waits until every key exists, or throws TimeoutError naming the missing ones.
  virtual void wait(const std::vector<std::string>& keys, Millis timeout) = 0;
  void wait(const std::vector<std::string>& keys) { wait(keys, timeout()); }
  // True when every key exists (no waiting).
  virtual bool check(const std::vector<std::string>& keys) = 0;
  // Returns whether the key existed.
  virtual bool delete_key(const std::string& key) = 0;
  // Deletes every key that starts with `prefix` (non-empty) and returns how
  // many there were; fault tolerance uses it to drop a finished epoch's keys.
  // The default (a Store written outside sinew) throws InvalidArgument.
  virtual int64_t delete_prefix(const std::string& prefix);
  // Waits for all keys and returns their values in order.
  virtual std::vector<Bytes> multi_get(const std::vector<std::string>& keys);
  virtual void multi_set(const std::vector<std::string>& keys, const std::vector<Bytes>& values);
  virtual int64_t num_keys() = 0;
  // Another client of the same store with its own connection, so a blocking
  // wait on one does not hold up the other (PyTorch's Store.clone()); nullptr
  // where this one can be shared without that (in-process and file stores).
  virtual std::shared_ptr<Store> clone() { return nullptr; }
  // This process's wall clock minus the store host's (ns), measured over a
  // few round trips; nullopt for stores in this process or on this disk.
  virtual std::optional<int64_t> clock_offset_ns() { return std::nullopt; }

  Millis timeout() const { return timeout_; }
  void set_timeout(Millis t) { timeout_ = t; }

  // Convenience for string values.
  void set(const std::string& key, std::string_view value) { set(key, to_bytes(value)); }
  std::string get_string(const std::string& key) { return to_string(get(key)); }

 protected:
  Millis timeout_{kDefaultTimeout};
};

using StorePtr = std::shared_ptr<Store>;

// Waits for `keys` until `deadline`, in slices of at most 100 ms so that a
// set `abort_flag` ends the wait promptly with AbortedError; `between`, when
// given, runs after each slice and may end the wait by throwing.
void wait_keys(Store& store, const std::vector<std::string>& keys, Deadline deadline,
               const std::atomic<bool>* abort_flag, const std::function<void()>& between = {});

// An in-process store (threads as ranks in tests).
StorePtr make_memory_store();

// Namespaces every key as "<prefix>/<key>"; a new prefix per group and per
// recovery epoch gives each a clean key space.
StorePtr make_prefix_store(std::string prefix, StorePtr base);

// A store backed by one file, shared by processes on one host or a shared
// file system (flock-serialised).
StorePtr make_file_store(const std::string& path, Millis timeout = Store::kDefaultTimeout);

}  // namespace sinew::dist
