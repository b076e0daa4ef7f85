#include "shm_collectives.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>

#include "sinew/core/env.h"

namespace sinew::dist::shm {
namespace {

// memcpy that allows null pointers for empty copies (zero-element tensors
// have no storage).
inline void copy_bytes(void* dst, const void* src, size_t n) {
  if (n) std::memcpy(dst, src, n);
}

const EnvParam<int64_t> kOneStepBytes{
    "SINEW_SHM_ALLREDUCE_1STEP_BYTES", 32 << 10,
    "allreduce up to this many bytes reduces the whole buffer on every rank in one step; larger "
    "ones reduce-scatter then allgather through shared memory"};

uint8_t* bytes_of(const TensorView& t) { return static_cast<uint8_t*>(t.data()); }

// Fills the descriptor of the first step.
OpDesc& begin(const Call& c, OpKind kind, DType dtype, int64_t count, int root, ReduceKind redop) {
  c.engine.check_usable();
  OpDesc& d = c.engine.my_next_desc();
  d = make_desc(c.seq, kind, dtype, count, root, redop);
  return d;
}

// After the first step: every rank compares every descriptor with rank 0's,
// so all ranks raise the same error naming both sides.
void check_descs(const Call& c, bool check_count) {
  const ShmEngine& e = c.engine;
  const OpDesc& ref = e.desc(0);
  for (int r = 1; r < e.size(); ++r) {
    const OpDesc& d = e.desc(r);
    bool same = d.seq == ref.seq && d.kind == ref.kind && d.dtype == ref.dtype && d.root == ref.root &&
                d.redop == ref.redop && (!check_count || d.count == ref.count);
    if (!same)
      throw InvalidArgument(fmt::format(
          "collective arguments differ across ranks: rank 0 called {} but rank {} called {} "
          "(every rank must issue the same collectives in the same order with matching "
          "op, dtype, count and root)",
          describe(ref), r, describe(d)));
  }
}

// Applies what premul_sum needs to this rank's contribution in the slot.
void prepare(uint8_t* p, size_t n, DType dt, const ReduceOp& op) { prepare_reduction(p, n, dt, op); }

// dst = src(0)[off..] op src(1)[off..] op ... in rank order, so every rank
// that reduces the same range gets bitwise the same result. Sources are the
// slots, or the fast boxes for tiny payloads.
void reduce_all(const ShmEngine& e, uint8_t* dst, size_t byte_off, size_t n, DType dt, ReduceKind k,
                bool boxed = false) {
  const size_t es = dtype_size(dt);
  auto src = [&](int r) { return (boxed ? e.inline_data(r) : e.slot(r)) + byte_off; };
  if (e.size() == 1) {
    if (n) std::memmove(dst, src(0), n * es);
    return;
  }
  reduce_pair(dst, src(0), src(1), n, dt, k);
  for (int r = 2; r < e.size(); ++r) reduce_into(dst, src(r), n, dt, k);
}

}  // namespace

void allreduce(const Call& c, const TensorView& t, const ReduceOp& op) {
  ShmEngine& e = c.engine;
  const DType dt = t.dtype();
  const size_t es = dtype_size(dt);
  const int64_t count = t.numel();
  const int W = e.size();
  uint8_t* data = bytes_of(t);
  const bool one_step = static_cast<int64_t>(t.nbytes()) <= kOneStepBytes.get();
  if (t.nbytes() <= ShmEngine::kInlineBytes) {
    begin(c, OpKind::kAllreduce, dt, count, -1, op.kind);
    uint8_t* box = e.my_next_inline();
    copy_bytes(box, data, t.nbytes());
    prepare(box, count, dt, op);
    e.step(c.deadline, "allreduce");
    check_descs(c, true);
    reduce_all(e, data, 0, count, dt, op.kind, /*boxed=*/true);
    finalize_reduction(data, count, dt, op, W);
    return;
  }
  const int64_t chunk = static_cast<int64_t>(e.slot_bytes() / es);
  int64_t off = 0;
  bool first = true;
  do {
    const int64_t n = std::min(chunk, count - off);
    const int64_t per = (n + W - 1) / W;
    auto lo_of = [&](int r) { return std::min<int64_t>(n, per * r); };
    auto hi_of = [&](int r) { return std::min<int64_t>(n, per * r + per); };
    uint8_t* chunk_data = data + off * es;
    begin(c, OpKind::kAllreduce, dt, count, -1, op.kind);
    uint8_t* slot = e.my_next_slot();
    // Two-step path: peers only read the slices they reduce, so my own slice
    // stays in my buffer (unless premul_sum must scale it first).
    const bool two_step = !one_step && W > 1;
    const bool skip_own = two_step && op.kind != ReduceKind::kPremulSum;
    if (skip_own) {
      for (int r = 0; r < W; ++r)
        if (r != e.rank() && hi_of(r) > lo_of(r))
          copy_bytes(slot + lo_of(r) * es, chunk_data + lo_of(r) * es, (hi_of(r) - lo_of(r)) * es);
    } else {
      copy_bytes(slot, chunk_data, n * es);
      prepare(slot, n, dt, op);
    }
    e.step(c.deadline, "allreduce");
    if (first) check_descs(c, true);
    first = false;
    if (!two_step) {
      reduce_all(e, chunk_data, 0, n, dt, op.kind);
      finalize_reduction(chunk_data, n, dt, op, W);
    } else {
      // Reduce my slice into the next step's slot (and my output), then
      // everyone copies the other slices.
      const int me = e.rank();
      const int64_t lo = lo_of(me), hi = hi_of(me);
      uint8_t* out = e.my_next_slot();
      begin(c, OpKind::kAllreduce, dt, count, -1, op.kind);
      if (hi > lo) {
        auto src = [&](int r) {
          return (r == me && skip_own ? chunk_data : e.slot(r)) + lo * es;
        };
        uint8_t* dst = out + lo * es;
        reduce_pair(dst, src(0), src(1), hi - lo, dt, op.kind);
        for (int r = 2; r < W; ++r) reduce_into(dst, src(r), hi - lo, dt, op.kind);
        finalize_reduction(dst, hi - lo, dt, op, W);
        copy_bytes(chunk_data + lo * es, dst, (hi - lo) * es);
      }
      e.step(c.deadline, "allreduce");
      for (int r = 0; r < W; ++r)
        if (r != me && hi_of(r) > lo_of(r))
          copy_bytes(chunk_data + lo_of(r) * es, e.slot(r) + lo_of(r) * es, (hi_of(r) - lo_of(r)) * es);
    }
    off += n;
  } while (off < count);
}

void broadcast(const Call& c, const TensorView& t, int root) {
  ShmEngine& e = c.engine;
  const size_t es = t.element_size();
  const int64_t count = t.numel();
  uint8_t* data = bytes_of(t);
  const int64_t chunk = static_cast<int64_t>(e.slot_bytes() / es);
  int64_t off = 0;
  bool first = true;
  do {
    const int64_t n = std::min(chunk, count - off);
    begin(c, OpKind::kBroadcast, t.dtype(), count, root, ReduceKind::kSum);
    if (e.rank() == root) copy_bytes(e.my_next_slot(), data + off * es, n * es);
    e.step(c.deadline, "broadcast");
    if (first) check_descs(c, true);
    first = false;
    if (e.rank() != root) copy_bytes(data + off * es, e.slot(root), n * es);
    off += n;
  } while (off < count);
}

void reduce(const Call& c, const TensorView& t, int root, const ReduceOp& op) {
  ShmEngine& e = c.engine;
  const DType dt = t.dtype();
  const size_t es = dtype_size(dt);
  const int64_t count = t.numel();
  uint8_t* data = bytes_of(t);
  const int64_t chunk = static_cast<int64_t>(e.slot_bytes() / es);
  int64_t off = 0;
  bool first = true;
  do {
    const int64_t n = std::min(chunk, count - off);
    begin(c, OpKind::kReduce, dt, count, root, op.kind);
    uint8_t* slot = e.my_next_slot();
    copy_bytes(slot, data + off * es, n * es);
    prepare(slot, n, dt, op);
    e.step(c.deadline, "reduce");
    if (first) check_descs(c, true);
    first = false;
    if (e.rank() == root) {
      reduce_all(e, data + off * es, 0, n, dt, op.kind);
      finalize_reduction(data + off * es, n, dt, op, e.size());
    }
    off += n;
  } while (off < count);
}

namespace {
// allgather and gather: each step moves a piece of every rank's block.
void gather_impl(const Call& c, const TensorView& out, const TensorView& in, int root, OpKind kind) {
  ShmEngine& e = c.engine;
  const size_t es = in.element_size();
  const int64_t m = in.numel();
  const uint8_t* src = bytes_of(in);
  uint8_t* dst = out.numel() > 0 ? bytes_of(out) : nullptr;
  const int64_t chunk = static_cast<int64_t>(e.slot_bytes() / es);
  const bool receive = root < 0 || e.rank() == root;
  int64_t off = 0;
  bool first = true;
  do {
    const int64_t n = std::min(chunk, m - off);
    begin(c, kind, in.dtype(), m, root, ReduceKind::kSum);
    copy_bytes(e.my_next_slot(), src + off * es, n * es);
    e.step(c.deadline, op_kind_name(kind));
    if (first) check_descs(c, true);
    first = false;
    if (receive)
      for (int r = 0; r < e.size(); ++r) copy_bytes(dst + (r * m + off) * es, e.slot(r), n * es);
    off += n;
  } while (off < m);
}
}  // namespace

void allgather(const Call& c, const TensorView& out, const TensorView& in) {
  gather_impl(c, out, in, -1, OpKind::kAllgather);
}

void gather(const Call& c, const TensorView& out, const TensorView& in, int root) {
  gather_impl(c, out, in, root, OpKind::kGather);
}

void scatter(const Call& c, const TensorView& out, const TensorView& in, int root) {
  ShmEngine& e = c.engine;
  const int W = e.size();
  const size_t es = out.element_size();
  const int64_t m = out.numel();
  uint8_t* dst = bytes_of(out);
  const uint8_t* src = in.numel() > 0 ? bytes_of(in) : nullptr;
  const int64_t chunk = std::max<int64_t>(1, static_cast<int64_t>(e.slot_bytes() / es / W));
  int64_t off = 0;
  bool first = true;
  do {
    const int64_t n = std::min(chunk, m - off);
    begin(c, OpKind::kScatter, out.dtype(), m, root, ReduceKind::kSum);
    if (e.rank() == root)
      for (int r = 0; r < W; ++r) copy_bytes(e.my_next_slot() + r * chunk * es, src + (r * m + off) * es, n * es);
    e.step(c.deadline, "scatter");
    if (first) check_descs(c, true);
    first = false;
    copy_bytes(dst + off * es, e.slot(root) + e.rank() * chunk * es, n * es);
    off += n;
  } while (off < m);
}

void reduce_scatter(const Call& c, const TensorView& out, const TensorView& in, const ReduceOp& op) {
  ShmEngine& e = c.engine;
  const int W = e.size();
  const DType dt = out.dtype();
  const size_t es = dtype_size(dt);
  const int64_t m = out.numel();
  const uint8_t* src = bytes_of(in);
  uint8_t* dst = bytes_of(out);
  const int64_t chunk = std::max<int64_t>(1, static_cast<int64_t>(e.slot_bytes() / es / W));
  int64_t off = 0;
  bool first = true;
  do {
    const int64_t n = std::min(chunk, m - off);
    begin(c, OpKind::kReduceScatter, dt, m, -1, op.kind);
    uint8_t* slot = e.my_next_slot();
    for (int r = 0; r < W; ++r) {
      copy_bytes(slot + r * chunk * es, src + (r * m + off) * es, n * es);
      prepare(slot + r * chunk * es, n, dt, op);
    }
    e.step(c.deadline, "reduce_scatter");
    if (first) check_descs(c, true);
    first = false;
    reduce_all(e, dst + off * es, e.rank() * chunk * es, n, dt, op.kind);
    finalize_reduction(dst + off * es, n, dt, op, W);
    off += n;
  } while (off < m);
}

void all_to_all(const Call& c, const TensorView& out, const TensorView& in,
                const std::vector<int64_t>& out_splits, const std::vector<int64_t>& in_splits) {
  ShmEngine& e = c.engine;
  const int W = e.size();
  const int me = e.rank();
  const size_t es = in.element_size();
  // Step 1 publishes both split lists so every rank checks every pair.
  const size_t need = 2 * W * sizeof(int64_t);
  if (need > e.slot_bytes())
    throw InvalidArgument::make("world size", std::to_string(W),
                                fmt::format("at most {} ranks for all_to_all with SINEW_SHM_SLOT_BYTES={}",
                                            e.slot_bytes() / 16, e.slot_bytes()));
  int64_t total_in = 0;
  for (auto v : in_splits) total_in += v;
  begin(c, OpKind::kAllToAll, in.dtype(), total_in, -1, ReduceKind::kSum);
  auto* lists = reinterpret_cast<int64_t*>(e.my_next_slot());
  std::copy(in_splits.begin(), in_splits.end(), lists);
  std::copy(out_splits.begin(), out_splits.end(), lists + W);
  e.step(c.deadline, "all_to_all");
  check_descs(c, false);
  for (int s = 0; s < W; ++s) {
    auto* ls = reinterpret_cast<const int64_t*>(e.slot(s));
    for (int d = 0; d < W; ++d) {
      auto* ld = reinterpret_cast<const int64_t*>(e.slot(d));
      if (ls[d] != ld[W + s])
        throw InvalidArgument(fmt::format(
            "all_to_all split sizes disagree: rank {} sends {} elements to rank {} (input_split_sizes[{}]) "
            "but rank {} expects {} from rank {} (output_split_sizes[{}])",
            s, ls[d], d, d, d, ld[W + s], s, s));
    }
  }
  // Data steps: each step carries up to `cap` elements for every pair.
  std::vector<int64_t> in_off(W, 0), out_off(W, 0);
  for (int r = 1; r < W; ++r) {
    in_off[r] = in_off[r - 1] + in_splits[r - 1];
    out_off[r] = out_off[r - 1] + out_splits[r - 1];
  }
  std::vector<int64_t> sent(W, 0), got(W, 0);
  const int64_t cap = std::max<int64_t>(1, static_cast<int64_t>(e.slot_bytes() / es / W));
  const uint8_t* src = in.numel() > 0 ? bytes_of(in) : nullptr;
  uint8_t* dst = out.numel() > 0 ? bytes_of(out) : nullptr;
  bool anyone_more = false;
  for (int s = 0; s < W; ++s)
    for (int d = 0; d < W; ++d) anyone_more |= reinterpret_cast<const int64_t*>(e.slot(s))[d] > 0;
  while (anyone_more) {
    OpDesc& d = begin(c, OpKind::kAllToAll, in.dtype(), total_in, -1, ReduceKind::kSum);
    uint8_t* slot = e.my_next_slot();
    int64_t left = 0;
    for (int r = 0; r < W; ++r) {
      const int64_t n = std::min(cap, in_splits[r] - sent[r]);
      if (n > 0) copy_bytes(slot + r * cap * es, src + (in_off[r] + sent[r]) * es, n * es);
      sent[r] += n;
      left += in_splits[r] - sent[r];
    }
    d.more = left;
    e.step(c.deadline, "all_to_all");
    anyone_more = false;
    for (int r = 0; r < W; ++r) {
      const int64_t n = std::min(cap, out_splits[r] - got[r]);
      if (n > 0) copy_bytes(dst + (out_off[r] + got[r]) * es, e.slot(r) + me * cap * es, n * es);
      got[r] += n;
      anyone_more |= e.desc(r).more > 0;
    }
  }
}

void barrier(const Call& c) {
  begin(c, OpKind::kBarrier, DType::kU8, 0, -1, ReduceKind::kSum);
  c.engine.step(c.deadline, "barrier");
  check_descs(c, true);
}

}  // namespace sinew::dist::shm
