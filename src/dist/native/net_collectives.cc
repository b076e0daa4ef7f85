#include "net_collectives.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <tuple>

#include "sinew/core/env.h"

namespace sinew::dist::net {
namespace {

const EnvParam<int64_t> kRdBytes{"SINEW_NET_ALLREDUCE_RD_BYTES", 64 << 10,
                                 "allreduce between hosts up to this size uses recursive doubling "
                                 "(power-of-two worlds); larger ones use the ring"};

uint64_t tag(const Call& c, uint32_t step) { return (c.seq << 20) | step; }
uint8_t* bytes_of(const TensorView& t) { return static_cast<uint8_t*>(t.data()); }

void exchange(const Call& c, int to, const void* s, size_t sn, int from, void* r, size_t rn, uint32_t step) {
  RequestPtr reqs[2] = {c.transport.isend(to, tag(c, step), s, sn), c.transport.irecv(from, tag(c, step), r, rn)};
  c.transport.wait(reqs, c.deadline);
}

struct Ranked {
  OpDesc d;
  int64_t rank;
};
auto key(const Ranked& x) {
  return std::make_tuple(x.d.seq, x.d.kind, x.d.dtype, x.d.count, x.d.root, x.d.redop);
}
bool less(const Ranked& a, const Ranked& b) {
  return key(a) < key(b) || (key(a) == key(b) && a.rank < b.rank);
}

// Segment boundaries of n elements split in W near-equal parts.
int64_t seg_lo(int64_t n, int W, int i) { return n * i / W; }

void ring_reduce_scatter_inplace(const Call& c, uint8_t* data, int64_t n, DType dt, ReduceKind k,
                                 uint32_t step0) {
  Transport& t = c.transport;
  const int W = t.size(), r = t.rank();
  const size_t es = dtype_size(dt);
  const int right = (r + 1) % W, left = (r - 1 + W) % W;
  std::vector<uint8_t> tmp((n / W + 1) * es);
  for (int i = 0; i < W - 1; ++i) {
    const int s = ((r - i) % W + W) % W, q = ((r - i - 1) % W + W) % W;
    const int64_t slo = seg_lo(n, W, s), shi = seg_lo(n, W, s + 1);
    const int64_t qlo = seg_lo(n, W, q), qhi = seg_lo(n, W, q + 1);
    exchange(c, right, data + slo * es, (shi - slo) * es, left, tmp.data(), (qhi - qlo) * es, step0 + i);
    reduce_into(data + qlo * es, tmp.data(), qhi - qlo, dt, k);
  }
  // Now rank r owns the full reduction of segment (r + 1) % W.
}

void ring_allgather_inplace(const Call& c, uint8_t* data, int64_t n, size_t es, uint32_t step0) {
  Transport& t = c.transport;
  const int W = t.size(), r = t.rank();
  const int right = (r + 1) % W, left = (r - 1 + W) % W;
  for (int i = 0; i < W - 1; ++i) {
    const int s = ((r + 1 - i) % W + W) % W, q = ((r - i) % W + W) % W;
    const int64_t slo = seg_lo(n, W, s), shi = seg_lo(n, W, s + 1);
    const int64_t qlo = seg_lo(n, W, q), qhi = seg_lo(n, W, q + 1);
    exchange(c, right, data + slo * es, (shi - slo) * es, left, data + qlo * es, (qhi - qlo) * es, step0 + i);
  }
}

OpDesc desc(const Call& c, OpKind k, DType dt, int64_t count, int root, ReduceKind redop) {
  OpDesc d;
  d.seq = c.seq;
  d.kind = static_cast<uint32_t>(k);
  d.dtype = static_cast<uint32_t>(dt);
  d.count = count;
  d.root = root;
  d.redop = static_cast<uint32_t>(redop);
  return d;
}

}  // namespace

void check_args(const Call& c, OpDesc mine, bool check_count) {
  Transport& t = c.transport;
  const int W = t.size(), r = t.rank();
  if (!check_count) mine.count = 0;
  Ranked lo{mine, r}, hi{mine, r};
  uint32_t step = 0xF0000;
  for (int dist = 1; dist < W; dist *= 2, ++step) {
    Ranked send[2] = {lo, hi}, recv[2];
    exchange(c, (r + dist) % W, send, sizeof(send), (r - dist + W) % W, recv, sizeof(recv), step);
    if (less(recv[0], lo)) lo = recv[0];
    if (less(hi, recv[1])) hi = recv[1];
  }
  if (key(lo) != key(hi))
    throw InvalidArgument(fmt::format(
        "collective arguments differ across ranks: rank {} called {} but rank {} called {} (every rank "
        "must issue the same collectives in the same order with matching op, dtype, count and root)",
        lo.rank, describe(lo.d), hi.rank, describe(hi.d)));
}

void allreduce(const Call& c, const TensorView& tv, const ReduceOp& op) {
  Transport& t = c.transport;
  const int W = t.size(), r = t.rank();
  const DType dt = tv.dtype();
  const int64_t n = tv.numel();
  const size_t es = dtype_size(dt);
  check_args(c, desc(c, OpKind::kAllreduce, dt, n, -1, op.kind), true);
  uint8_t* data = bytes_of(tv);
  prepare_reduction(data, n, dt, op);
  const bool pow2 = (W & (W - 1)) == 0;
  if (W > 1 && pow2 && static_cast<int64_t>(n * es) <= kRdBytes.get()) {
    // Recursive doubling: lower rank's data first so both sides combine in
    // the same order and stay bitwise equal.
    std::vector<uint8_t> tmp(n * es);
    uint32_t step = 0;
    for (int mask = 1; mask < W; mask <<= 1, ++step) {
      const int peer = r ^ mask;
      exchange(c, peer, data, n * es, peer, tmp.data(), n * es, step);
      if (peer < r) reduce_pair(data, tmp.data(), data, n, dt, op.kind);
      else reduce_into(data, tmp.data(), n, dt, op.kind);
    }
  } else if (W > 1) {
    ring_reduce_scatter_inplace(c, data, n, dt, op.kind, 0);
    ring_allgather_inplace(c, data, n, es, W);
  }
  finalize_reduction(data, n, dt, op, W);
}

void broadcast(const Call& c, const TensorView& tv, int root) {
  Transport& t = c.transport;
  const int W = t.size();
  check_args(c, desc(c, OpKind::kBroadcast, tv.dtype(), tv.numel(), root, ReduceKind::kSum), true);
  const int vr = (t.rank() - root + W) % W;  // rank relative to the root
  uint8_t* data = bytes_of(tv);
  const size_t bytes = tv.nbytes();
  int mask = 1;
  while (mask < W) {
    if (vr & mask) {
      t.recv((vr - mask + root) % W, tag(c, 0), data, bytes, c.deadline);
      break;
    }
    mask <<= 1;
  }
  std::vector<RequestPtr> sends;
  for (mask >>= 1; mask > 0; mask >>= 1)
    if (vr + mask < W) sends.push_back(t.isend((vr + mask + root) % W, tag(c, 0), data, bytes));
  t.wait(sends, c.deadline);
}

void reduce(const Call& c, const TensorView& tv, int root, const ReduceOp& op) {
  Transport& t = c.transport;
  const int W = t.size();
  const DType dt = tv.dtype();
  const int64_t n = tv.numel();
  const size_t es = dtype_size(dt);
  check_args(c, desc(c, OpKind::kReduce, dt, n, root, op.kind), true);
  const int vr = (t.rank() - root + W) % W;
  // Non-roots keep their input: accumulate in scratch.
  std::vector<uint8_t> acc(n * es), tmp(n * es);
  std::memcpy(acc.data(), tv.data(), n * es);
  prepare_reduction(acc.data(), n, dt, op);
  int mask = 1;
  while (mask < W) {
    if (vr & mask) {
      t.send((vr - mask + root) % W, tag(c, 0), acc.data(), n * es, c.deadline);
      break;
    }
    if (vr + mask < W) {
      t.recv((vr + mask + root) % W, tag(c, 0), tmp.data(), n * es, c.deadline);
      reduce_into(acc.data(), tmp.data(), n, dt, op.kind);
    }
    mask <<= 1;
  }
  if (vr == 0) {
    finalize_reduction(acc.data(), n, dt, op, W);
    std::memcpy(tv.data(), acc.data(), n * es);
  }
}

void allgather(const Call& c, const TensorView& out, const TensorView& in) {
  Transport& t = c.transport;
  const int W = t.size(), r = t.rank();
  const int64_t m = in.numel();
  const size_t es = in.element_size();
  check_args(c, desc(c, OpKind::kAllgather, in.dtype(), m, -1, ReduceKind::kSum), true);
  uint8_t* dst = bytes_of(out);
  if (m > 0) std::memcpy(dst + r * m * es, in.data(), m * es);
  const int right = (r + 1) % W, left = (r - 1 + W) % W;
  for (int i = 0; i < W - 1; ++i) {
    const int s = ((r - i) % W + W) % W, q = ((r - i - 1) % W + W) % W;
    exchange(c, right, dst + s * m * es, m * es, left, dst + q * m * es, m * es, i);
  }
}

void gather(const Call& c, const TensorView& out, const TensorView& in, int root) {
  Transport& t = c.transport;
  const int W = t.size(), r = t.rank();
  const int64_t m = in.numel();
  const size_t es = in.element_size();
  check_args(c, desc(c, OpKind::kGather, in.dtype(), m, root, ReduceKind::kSum), true);
  if (r != root) {
    t.send(root, tag(c, 0), in.data(), m * es, c.deadline);
    return;
  }
  uint8_t* dst = bytes_of(out);
  std::vector<RequestPtr> reqs;
  for (int q = 0; q < W; ++q)
    if (q != r) reqs.push_back(t.irecv(q, tag(c, 0), dst + q * m * es, m * es));
  if (m > 0) std::memcpy(dst + r * m * es, in.data(), m * es);
  t.wait(reqs, c.deadline);
}

void scatter(const Call& c, const TensorView& out, const TensorView& in, int root) {
  Transport& t = c.transport;
  const int W = t.size(), r = t.rank();
  const int64_t m = out.numel();
  const size_t es = out.element_size();
  check_args(c, desc(c, OpKind::kScatter, out.dtype(), m, root, ReduceKind::kSum), true);
  if (r != root) {
    t.recv(root, tag(c, 0), out.data(), m * es, c.deadline);
    return;
  }
  const uint8_t* src = bytes_of(in);
  std::vector<RequestPtr> reqs;
  for (int q = 0; q < W; ++q)
    if (q != r) reqs.push_back(t.isend(q, tag(c, 0), src + q * m * es, m * es));
  if (m > 0) std::memcpy(out.data(), src + r * m * es, m * es);
  t.wait(reqs, c.deadline);
}

void reduce_scatter(const Call& c, const TensorView& out, const TensorView& in, const ReduceOp& op) {
  Transport& t = c.transport;
  const int W = t.size(), r = t.rank();
  const DType dt = out.dtype();
  const int64_t m = out.numel();
  const size_t es = dtype_size(dt);
  check_args(c, desc(c, OpKind::kReduceScatter, dt, m, -1, op.kind), true);
  // Ring over W blocks of m; block b ends reduced on rank (b - 1) mod W, so
  // rotate by one: rank r's block is stored at segment (r - 1) mod W... we
  // keep it simple and reduce in scratch, then pick our block.
  std::vector<uint8_t> acc(in.nbytes());
  if (!acc.empty()) std::memcpy(acc.data(), in.data(), acc.size());
  prepare_reduction(acc.data(), W * m, dt, op);
  const int right = (r + 1) % W, left = (r - 1 + W) % W;
  std::vector<uint8_t> tmp(m * es);
  for (int i = 0; i < W - 1; ++i) {
    // Send block (r - i - 1), receive block (r - i - 2): after W-1 steps rank
    // r holds the full reduction of block r.
    const int s = ((r - i - 1) % W + W) % W, q = ((r - i - 2) % W + W) % W;
    exchange(c, right, acc.data() + s * m * es, m * es, left, tmp.data(), m * es, i);
    reduce_into(acc.data() + q * m * es, tmp.data(), m, dt, op.kind);
  }
  finalize_reduction(acc.data() + r * m * es, m, dt, op, W);
  if (m > 0) std::memcpy(out.data(), acc.data() + r * m * es, m * es);
}

void all_to_all(const Call& c, const TensorView& out, const TensorView& in,
                const std::vector<int64_t>& out_splits, const std::vector<int64_t>& in_splits) {
  Transport& t = c.transport;
  const int W = t.size(), r = t.rank();
  const size_t es = in.element_size();
  check_args(c, desc(c, OpKind::kAllToAll, in.dtype(), 0, -1, ReduceKind::kSum), false);
  // Exchange split sizes so a disagreement is an error on both sides of the
  // pair, not a short read.
  std::vector<int64_t> peer_sends(W);
  {
    std::vector<RequestPtr> reqs;
    for (int q = 0; q < W; ++q) {
      if (q == r) continue;
      reqs.push_back(t.isend(q, tag(c, 1), &in_splits[q], sizeof(int64_t)));
      reqs.push_back(t.irecv(q, tag(c, 1), &peer_sends[q], sizeof(int64_t)));
    }
    t.wait(reqs, c.deadline);
  }
  peer_sends[r] = in_splits[r];
  // Agree on the first disagreement (lowest receiving rank) so every rank
  // raises the same error instead of only the pair that saw it.
  struct Bad {
    int64_t receiver, sender, sent, expected;
  } bad{W, -1, 0, 0};
  for (int q = 0; q < W && bad.receiver == W; ++q)
    if (peer_sends[q] != out_splits[q]) bad = {r, q, peer_sends[q], out_splits[q]};
  uint32_t step = 0xE0000;
  for (int dist = 1; dist < W; dist *= 2, ++step) {
    Bad got;
    exchange(c, (r + dist) % W, &bad, sizeof(bad), (r - dist + W) % W, &got, sizeof(got), step);
    if (got.receiver < bad.receiver) bad = got;
  }
  if (bad.receiver < W)
    throw InvalidArgument(fmt::format(
        "all_to_all split sizes disagree: rank {} sends {} elements to rank {} but rank {} expects {} "
        "(output_split_sizes[{}])",
        bad.sender, bad.sent, bad.receiver, bad.receiver, bad.expected, bad.sender));
  std::vector<int64_t> in_off(W, 0), out_off(W, 0);
  for (int q = 1; q < W; ++q) {
    in_off[q] = in_off[q - 1] + in_splits[q - 1];
    out_off[q] = out_off[q - 1] + out_splits[q - 1];
  }
  const uint8_t* src = in.numel() ? bytes_of(in) : nullptr;
  uint8_t* dst = out.numel() ? bytes_of(out) : nullptr;
  std::vector<RequestPtr> reqs;
  for (int i = 1; i < W; ++i) {
    const int to = (r + i) % W, from = (r - i + W) % W;
    reqs.push_back(t.irecv(from, tag(c, 2), dst + out_off[from] * es, out_splits[from] * es));
    reqs.push_back(t.isend(to, tag(c, 2), src + in_off[to] * es, in_splits[to] * es));
  }
  if (in_splits[r] > 0) std::memcpy(dst + out_off[r] * es, src + in_off[r] * es, in_splits[r] * es);
  t.wait(reqs, c.deadline);
}

void barrier(const Call& c) {
  // The argument check is itself a dissemination barrier.
  check_args(c, desc(c, OpKind::kBarrier, DType::kU8, 0, -1, ReduceKind::kSum), true);
}

}  // namespace sinew::dist::net
