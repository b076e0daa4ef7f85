// Grow-only aligned scratch memory. Kernels keep one per thread (the pool's
// workers persist), so steady-state calls allocate nothing.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <new>
#include <utility>

namespace sinew {

class AlignedBuffer {
 public:
  explicit AlignedBuffer(size_t alignment = 64) : align_(alignment) {}
  ~AlignedBuffer() { std::free(p_); }
  AlignedBuffer(AlignedBuffer&& o) noexcept
      : p_(std::exchange(o.p_, nullptr)), cap_(std::exchange(o.cap_, 0)), align_(o.align_) {}
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept {
    if (this != &o) {
      std::free(p_);
      p_ = std::exchange(o.p_, nullptr);
      cap_ = std::exchange(o.cap_, 0);
      align_ = o.align_;
    }
    return *this;
  }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;

  // At least `bytes` of memory aligned to the buffer's alignment. Growing
  // drops the old contents; it grows by at least half again, so a slowly
  // rising size reallocates a logarithmic number of times.
  void* get(size_t bytes) {
    if (bytes > cap_ || !p_) {
      std::free(p_);
      p_ = nullptr;
      const size_t want = std::max({bytes, cap_ + cap_ / 2, size_t{1}});
      const size_t cap = (want + align_ - 1) / align_ * align_;
      p_ = std::aligned_alloc(align_, cap);
      if (!p_) {
        cap_ = 0;
        throw std::bad_alloc();
      }
      cap_ = cap;
    }
    return p_;
  }
  template <class T> T* get_as(size_t count) { return static_cast<T*>(get(count * sizeof(T))); }
  size_t capacity() const { return cap_; }

 private:
  void* p_ = nullptr;
  size_t cap_ = 0;
  size_t align_;
};

}  // namespace sinew
