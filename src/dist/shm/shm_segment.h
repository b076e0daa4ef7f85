// A POSIX shared-memory segment mapped into this process (RAII).
#pragma once

#include <cstddef>
#include <string>

namespace sinew::dist {

class ShmSegment {
 public:
  ShmSegment() = default;
  // Creates (O_EXCL) and maps a zero-filled segment of `bytes`.
  static ShmSegment create(const std::string& name, size_t bytes);
  // Maps an existing segment; its size is read from the object.
  static ShmSegment open(const std::string& name);
  ~ShmSegment();
  ShmSegment(ShmSegment&& o) noexcept;
  ShmSegment& operator=(ShmSegment&& o) noexcept;
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  void* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& name() const { return name_; }
  // Removes the name; the mapping stays valid until unmapped. Idempotent.
  void unlink();

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
  std::string name_;
  bool owner_ = false;
};

}  // namespace sinew::dist
