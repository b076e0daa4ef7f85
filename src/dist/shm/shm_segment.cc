#include "dist/shm/shm_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "sinew/core/error.h"

namespace sinew::dist {

ShmSegment ShmSegment::create(const std::string& name, size_t bytes) {
  int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) throw IoError(fmt::format("shm_open({}) for create failed: {}", name, std::strerror(errno)));
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    int e = errno;
    ::close(fd);
    ::shm_unlink(name.c_str());
    throw IoError(fmt::format("ftruncate of shared memory {} to {} bytes failed: {} (is /dev/shm large enough?)",
                              name, bytes, std::strerror(e)));
  }
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int e = errno;
  ::close(fd);
  if (p == MAP_FAILED) {
    ::shm_unlink(name.c_str());
    throw IoError(fmt::format("mmap of shared memory {} ({} bytes) failed: {}", name, bytes, std::strerror(e)));
  }
  // Huge pages where the kernel allows: fewer TLB misses on large slots.
  ::madvise(p, bytes, MADV_HUGEPAGE);
  ShmSegment s;
  s.data_ = p;
  s.size_ = bytes;
  s.name_ = name;
  s.owner_ = true;
  return s;
}

ShmSegment ShmSegment::open(const std::string& name) {
  int fd = ::shm_open(name.c_str(), O_RDWR, 0600);
  if (fd < 0) throw IoError(fmt::format("shm_open({}) failed: {}", name, std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || st.st_size <= 0) {
    int e = errno;
    ::close(fd);
    throw IoError(fmt::format("fstat of shared memory {} failed or empty: {}", name, std::strerror(e)));
  }
  size_t bytes = static_cast<size_t>(st.st_size);
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int e = errno;
  ::close(fd);
  if (p == MAP_FAILED) throw IoError(fmt::format("mmap of shared memory {} failed: {}", name, std::strerror(e)));
  ShmSegment s;
  s.data_ = p;
  s.size_ = bytes;
  s.name_ = name;
  return s;
}

ShmSegment::~ShmSegment() {
  if (owner_) unlink();
  if (data_) ::munmap(data_, size_);
}

ShmSegment::ShmSegment(ShmSegment&& o) noexcept { *this = std::move(o); }

ShmSegment& ShmSegment::operator=(ShmSegment&& o) noexcept {
  if (this != &o) {
    if (owner_) unlink();
    if (data_) ::munmap(data_, size_);
    data_ = o.data_;
    size_ = o.size_;
    name_ = std::move(o.name_);
    owner_ = o.owner_;
    o.data_ = nullptr;
    o.size_ = 0;
    o.owner_ = false;
  }
  return *this;
}

void ShmSegment::unlink() {
  if (owner_ && !name_.empty()) ::shm_unlink(name_.c_str());
  owner_ = false;
}

}  // namespace sinew::dist
