#include "mpi_runtime.h"

#include <fmt/format.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "sinew/core/error.h"
#include "sinew/core/log.h"

namespace sinew::dist::mpi {
namespace {

constexpr size_t kNumDTypes = std::size(kAllDTypes);
constexpr size_t kNumKinds = static_cast<size_t>(ReduceKind::kPremulSum) + 1;

struct Handles {
  std::array<MPI_Datatype, kNumDTypes> types{};
  std::array<MPI_Op, kNumKinds> user_ops{};
  int tag_ub = 32767;
};

std::mutex& mpi_mutex() {
  static std::mutex m;
  return m;
}
// Guarded by mpi_mutex(); written once, then read without the lock (the user
// ops run inside MPI calls, which already hold it).
Handles* g_handles = nullptr;
bool g_finalized = false;

size_t index_of(DType d) { return static_cast<size_t>(d); }

// MPI calls user ops with the datatype of the buffer; each sinew dtype has
// its own MPI type handle, so the handle identifies the dtype.
template <ReduceKind K>
void combine(void* in, void* inout, int* len, MPI_Datatype* type) {
  for (DType d : kAllDTypes) {
    if (g_handles->types[index_of(d)] == *type) {
      reduce_into(inout, in, static_cast<size_t>(*len), d, K);
      return;
    }
  }
  // Only sinew passes these ops, always with its own types; an exception
  // cannot cross MPI's C frames.
  std::fprintf(stderr, "sinew mpi backend: reduction called with an unknown MPI datatype\n");
  std::abort();
}

// Types MPI has arithmetic for; the others get their own handles.
bool is_narrow(DType d) {
  switch (d) {
    case DType::kF32:
    case DType::kF64:
    case DType::kI8:
    case DType::kU8:
    case DType::kI32:
    case DType::kI64: return false;
    default: return true;
  }
}

void release_handles(Handles& h) {
  for (auto& op : h.user_ops)
    if (op != MPI_OP_NULL) MPI_Op_free(&op);
  for (DType d : kAllDTypes)
    if (is_narrow(d)) MPI_Type_free(&h.types[index_of(d)]);
}

void finalize_at_exit() {
  std::lock_guard<std::mutex> g(mpi_mutex());
  if (g_finalized) return;
  g_finalized = true;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (g_handles) release_handles(*g_handles);
  MPI_Finalize();
}

MPI_Datatype narrow_type(int bytes) {
  MPI_Datatype t;
  check(MPI_Type_contiguous(bytes, MPI_BYTE, &t), "MPI_Type_contiguous");
  check(MPI_Type_commit(&t), "MPI_Type_commit");
  return t;
}

template <ReduceKind K>
void add_user_op(Handles& h) {
  check(MPI_Op_create(&combine<K>, /*commute=*/1, &h.user_ops[static_cast<size_t>(K)]), "MPI_Op_create");
}

Handles* create_handles() {
  auto h = std::make_unique<Handles>();
  h->user_ops.fill(MPI_OP_NULL);
  h->types[index_of(DType::kF32)] = MPI_FLOAT;
  h->types[index_of(DType::kF64)] = MPI_DOUBLE;
  h->types[index_of(DType::kI8)] = MPI_INT8_T;
  h->types[index_of(DType::kU8)] = MPI_UINT8_T;
  h->types[index_of(DType::kI32)] = MPI_INT32_T;
  h->types[index_of(DType::kI64)] = MPI_INT64_T;
  for (DType d : kAllDTypes)
    if (is_narrow(d)) h->types[index_of(d)] = narrow_type(static_cast<int>(dtype_size(d)));
  add_user_op<ReduceKind::kSum>(*h);
  add_user_op<ReduceKind::kProd>(*h);
  add_user_op<ReduceKind::kMin>(*h);
  add_user_op<ReduceKind::kMax>(*h);
  add_user_op<ReduceKind::kBand>(*h);
  add_user_op<ReduceKind::kBor>(*h);
  add_user_op<ReduceKind::kBxor>(*h);
  int* ub = nullptr;
  int flag = 0;
  check(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag), "MPI_Comm_get_attr(MPI_TAG_UB)");
  if (flag && ub) h->tag_ub = *ub;
  return h.release();
}

}  // namespace

std::string error_string(int rc) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) return fmt::format("MPI error {}", rc);
  return std::string(text, static_cast<size_t>(len));
}

void check(int rc, const std::string& what) {
  if (rc != MPI_SUCCESS) throw IoError(fmt::format("{} failed: {} (MPI error {})", what, error_string(rc), rc));
}

void ensure_initialized() {
  std::lock_guard<std::mutex> g(mpi_mutex());
  if (g_handles) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized || g_finalized)
    throw IoError("mpi backend: MPI was already finalized; create mpi groups before MPI_Finalize");
  int initialized = 0;
  MPI_Initialized(&initialized);
  int provided = MPI_THREAD_SINGLE;
  if (!initialized) {
    check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread");
    std::atexit(finalize_at_exit);
    SINEW_INFO(kInit, "mpi backend: initialised MPI (thread level {})", provided);
  } else {
    check(MPI_Query_thread(&provided), "MPI_Query_thread");
  }
  if (provided < MPI_THREAD_SERIALIZED)
    throw IoError(fmt::format("mpi backend: MPI provides thread level {}, needs MPI_THREAD_SERIALIZED "
                              "({}) or more (initialise MPI with MPI_Init_thread, or let sinew do it)",
                              provided, MPI_THREAD_SERIALIZED));
  g_handles = create_handles();
}

Lock::Lock() : lock_(mpi_mutex()) {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (g_finalized || finalized) {
    g_finalized = true;
    throw IoError("mpi backend: MPI has been finalized (the process is exiting or the program called "
                  "MPI_Finalize); the group can no longer communicate");
  }
}

std::string share_from_rank0(const std::string& value, Deadline deadline) {
  ensure_initialized();
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0 && value.size() >= kShareMaxBytes)
    throw InternalError(fmt::format("mpi: {} bytes to share, at most {}", value.size(), kShareMaxBytes - 1));
  char buf[kShareMaxBytes] = {};
  if (rank == 0) std::memcpy(buf, value.data(), value.size());
  MPI_Request req;
  {
    Lock l;
    check(MPI_Ibcast(buf, static_cast<int>(kShareMaxBytes), MPI_CHAR, 0, MPI_COMM_WORLD, &req), "MPI_Ibcast");
  }
  Backoff backoff;
  for (;;) {
    int done = 0;
    {
      Lock l;
      check(MPI_Test(&req, &done, MPI_STATUS_IGNORE), "MPI_Test");
    }
    if (done) break;
    // An MPI broadcast cannot be withdrawn: the request is left behind, and
    // the job is failing anyway (rank 0 never arrived).
    if (deadline.expired())
      throw TimeoutError("mpi: rank 0 did not share the job store's address before the deadline (did every rank "
                         "call init_process_group?)");
    backoff.pause();
  }
  return std::string(buf, strnlen(buf, kShareMaxBytes));
}

MPI_Datatype datatype(DType dtype) { return g_handles->types[index_of(dtype)]; }

MPI_Op reduce_op(DType dtype, ReduceKind kind) {
  if (!is_narrow(dtype)) {
    switch (kind) {
      case ReduceKind::kSum: return MPI_SUM;
      case ReduceKind::kProd: return MPI_PROD;
      case ReduceKind::kMin: return MPI_MIN;
      case ReduceKind::kMax: return MPI_MAX;
      case ReduceKind::kBand: return MPI_BAND;
      case ReduceKind::kBor: return MPI_BOR;
      case ReduceKind::kBxor: return MPI_BXOR;
      default: break;
    }
  }
  MPI_Op op = g_handles->user_ops[static_cast<size_t>(kind)];
  if (op == MPI_OP_NULL) throw InternalError(fmt::format("mpi backend: no wire op for {}", reduce_kind_name(kind)));
  return op;
}

int tag_upper_bound() { return g_handles->tag_ub; }

}  // namespace sinew::dist::mpi
