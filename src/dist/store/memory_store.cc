// An in-process store: ranks as threads in tests.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <condition_variable>
#include <map>
#include <mutex>

#include "sinew/core/error.h"
#include "erase_prefix.h"
#include "sinew/core/check.h"
#include "sinew/dist/store.h"

namespace sinew::dist {
namespace {

class MemoryStore final : public Store {
 public:
  void set(const std::string& key, const Bytes& value) override {
    {
      std::lock_guard<std::mutex> g(mu_);
      data_[key] = value;
    }
    cv_.notify_all();
  }

  Bytes get(const std::string& key) override {
    wait({key}, timeout_);
    std::lock_guard<std::mutex> g(mu_);
    return data_.at(key);
  }

  int64_t add(const std::string& key, int64_t delta) override {
    int64_t v = 0;
    {
      std::lock_guard<std::mutex> g(mu_);
      auto it = data_.find(key);
      if (it != data_.end()) v = std::stoll(to_string(it->second));
      v += delta;
      data_[key] = to_bytes(std::to_string(v));
    }
    cv_.notify_all();
    return v;
  }

  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override {
    Bytes now;
    {
      std::lock_guard<std::mutex> g(mu_);
      auto it = data_.find(key);
      if (it == data_.end()) {
        if (!expected.empty()) return expected;  // torch returns expected when missing
        data_[key] = desired;
        now = desired;
      } else if (it->second == expected) {
        it->second = desired;
        now = desired;
      } else {
        return it->second;
      }
    }
    cv_.notify_all();
    return now;
  }

  void wait(const std::vector<std::string>& keys, Millis timeout) override {
    std::unique_lock<std::mutex> lk(mu_);
    auto have_all = [&] {
      for (const auto& k : keys)
        if (!data_.count(k)) return false;
      return true;
    };
    if (!cv_.wait_for(lk, timeout, have_all)) {
      std::vector<std::string> missing;
      for (const auto& k : keys)
        if (!data_.count(k)) missing.push_back(k);
      throw TimeoutError(fmt::format("store wait timed out after {} ms; missing keys {}",
                                     timeout.count(), missing));
    }
  }

  bool check(const std::vector<std::string>& keys) override {
    std::lock_guard<std::mutex> g(mu_);
    for (const auto& k : keys)
      if (!data_.count(k)) return false;
    return true;
  }

  bool delete_key(const std::string& key) override {
    std::lock_guard<std::mutex> g(mu_);
    return data_.erase(key) > 0;
  }

  int64_t delete_prefix(const std::string& prefix) override {
    SINEW_ARG_CHECK(!prefix.empty(), "prefix", "''", "a non-empty key prefix");
    std::lock_guard<std::mutex> g(mu_);
    return erase_prefix(data_, prefix);
  }

  int64_t num_keys() override {
    std::lock_guard<std::mutex> g(mu_);
    return static_cast<int64_t>(data_.size());
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, Bytes> data_;
};

class PrefixStore final : public Store {
 public:
  PrefixStore(std::string prefix, StorePtr base) : prefix_(std::move(prefix)), base_(std::move(base)) {
    timeout_ = base_->timeout();
  }
  StorePtr clone() override {
    StorePtr b = base_->clone();
    return b ? std::make_shared<PrefixStore>(prefix_, std::move(b)) : nullptr;
  }
  void set(const std::string& key, const Bytes& value) override { base_->set(k(key), value); }
  Bytes get(const std::string& key) override {
    base_->wait({k(key)}, timeout_);  // our timeout, not the base's
    return base_->get(k(key));
  }
  int64_t add(const std::string& key, int64_t delta) override { return base_->add(k(key), delta); }
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override {
    return base_->compare_set(k(key), expected, desired);
  }
  void wait(const std::vector<std::string>& keys, Millis timeout) override { base_->wait(ks(keys), timeout); }
  bool check(const std::vector<std::string>& keys) override { return base_->check(ks(keys)); }
  bool delete_key(const std::string& key) override { return base_->delete_key(k(key)); }
  std::vector<Bytes> multi_get(const std::vector<std::string>& keys) override {
    base_->wait(ks(keys), timeout_);
    return base_->multi_get(ks(keys));
  }
  void multi_set(const std::vector<std::string>& keys, const std::vector<Bytes>& values) override {
    base_->multi_set(ks(keys), values);
  }
  int64_t num_keys() override { return base_->num_keys(); }
  int64_t delete_prefix(const std::string& prefix) override {
    // Checked here: our own prefix would make "" mean "all of this store".
    SINEW_ARG_CHECK(!prefix.empty(), "prefix", "''", "a non-empty key prefix");
    return base_->delete_prefix(k(prefix));
  }
  std::optional<int64_t> clock_offset_ns() override { return base_->clock_offset_ns(); }

 private:
  std::string k(const std::string& key) const { return prefix_ + "/" + key; }
  std::vector<std::string> ks(const std::vector<std::string>& keys) const {
    std::vector<std::string> out;
    out.reserve(keys.size());
    for (const auto& key : keys) out.push_back(k(key));
    return out;
  }
  std::string prefix_;
  StorePtr base_;
};

}  // namespace

StorePtr make_memory_store() { return std::make_shared<MemoryStore>(); }

StorePtr make_prefix_store(std::string prefix, StorePtr base) {
  if (!base) throw InvalidArgument::make("base", "nullptr", "a store to prefix");
  return std::make_shared<PrefixStore>(std::move(prefix), std::move(base));
}

}  // namespace sinew::dist
