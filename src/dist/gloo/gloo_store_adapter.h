// Lets gloo's rendezvous (connectFullMesh) run over any sinew Store, with
// every wait bounded by the group's timeout. Internal to the gloo backend.
#pragma once

#include <gloo/rendezvous/store.h>

#include "sinew/dist/store.h"

namespace sinew::dist {

class GlooStoreAdapter final : public gloo::rendezvous::Store {
 public:
  GlooStoreAdapter(StorePtr store, Millis timeout);

  void set(const std::string& key, const std::vector<char>& data) override;
  // Waits for the key up to the adapter's timeout (TimeoutError names it).
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;

 private:
  StorePtr store_;
  Millis timeout_;
};

}  // namespace sinew::dist
