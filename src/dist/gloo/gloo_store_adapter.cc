#include "gloo_store_adapter.h"

#include "sinew/core/check.h"

namespace sinew::dist {

GlooStoreAdapter::GlooStoreAdapter(StorePtr store, Millis timeout)
    : store_(std::move(store)), timeout_(timeout) {
  SINEW_ARG_CHECK(store_ != nullptr, "store", "nullptr", "a store for the gloo rendezvous");
}

void GlooStoreAdapter::set(const std::string& key, const std::vector<char>& data) {
  store_->set(key, Bytes(data.begin(), data.end()));
}

std::vector<char> GlooStoreAdapter::get(const std::string& key) {
  store_->wait({key}, timeout_);
  Bytes value = store_->get(key);
  return std::vector<char>(value.begin(), value.end());
}

void GlooStoreAdapter::wait(const std::vector<std::string>& keys) { store_->wait(keys, timeout_); }

void GlooStoreAdapter::wait(const std::vector<std::string>& keys,
                            const std::chrono::milliseconds& timeout) {
  // gloo passes its context timeout (the group's); never wait longer, and
  // read gloo's "no timeout" (zero) as ours.
  store_->wait(keys, timeout.count() > 0 ? std::min<Millis>(timeout, timeout_) : timeout_);
}

}  // namespace sinew::dist
