#include "net_collectives.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <tuple>

#include "sinew/core/env.h"

namespace sinew::dist::net {
namespace {

// memcpy that allows null pointers for empty copies (zero-element tensors
// have no storage).
inline void copy_bytes(void* dst, const void* src, size_t n) {
  if (n) std::memcpy(dst, src, n);
}

const EnvParam<int64_t> kRdBytes{"SINEW_NET_ALLREDUCE_RD_BYTES", 64 << 10,
                                 "allreduce between hosts up to this size uses recursive doubling; "
                                 "larger ones use the pipelined ring"};

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

const EnvParam<int64_t> kChunkBytes{"SINEW_NET_CHUNK_BYTES", 256 << 10,
                                    "pipeline chunk of the ring algorithms between hosts"};

// Ring allreduce, chunked and pipelined: each segment moves in chunks, and a
// chunk is forwarded as soon as it is reduced (reduce-scatter) or received
// (allgather), so the network and the reduction overlap.
void ring_allreduce(const Call& c, uint8_t* data, int64_t n, DType dt, ReduceKind k) {
  Transport& t = c.transport;
  const int W = t.size(), r = t.rank();
  const size_t es = dtype_size(dt);
  const int right = (r + 1) % W, left = (r - 1 + W) % W;
  const int64_t max_seg = n / W + 1;
  const int64_t ce = std::max<int64_t>(1, kChunkBytes.get() / static_cast<int64_t>(es));
  const int64_t K = (max_seg + ce - 1) / ce;  // chunks per segment, the same on every rank
  auto mod = [W](int v) { return ((v % W) + W) % W; };
  auto chunk = [&](int seg, int64_t j) {
    const int64_t lo = seg_lo(n, W, seg), hi = seg_lo(n, W, seg + 1);
    const int64_t a = std::min(hi, lo + j * ce), b = std::min(hi, lo + (j + 1) * ce);
    return std::pair<int64_t, int64_t>{a, b - a};
  };
  auto step_tag = [&](int phase, int i, int64_t j) {
    return tag(c, static_cast<uint32_t>((phase * (W - 1) + i) * K + j));
  };
  std::vector<uint8_t> tmp(static_cast<size_t>(K * ce) * es);
  std::vector<RequestPtr> sends, ag_sends;
  for (int64_t j = 0; j < K; ++j) {
    auto [off, len] = chunk(r, j);
    sends.push_back(t.isend(right, step_tag(0, 0, j), data + off * es, len * es));
  }
  // Reduce-scatter: at step i receive segment r-i-1 and forward it reduced.
  for (int i = 0; i < W - 1; ++i) {
    const int q = mod(r - i - 1);
    std::vector<RequestPtr> recvs;
    for (int64_t j = 0; j < K; ++j)
      recvs.push_back(t.irecv(left, step_tag(0, i, j), tmp.data() + j * ce * es, chunk(q, j).second * es));
    for (int64_t j = 0; j < K; ++j) {
      t.wait({&recvs[j], 1}, c.deadline);
      auto [off, len] = chunk(q, j);
      reduce_into(data + off * es, tmp.data() + j * ce * es, len, dt, k);
      // Next reduce-scatter step, or (after the last) allgather step 0.
      if (i + 1 < W - 1) sends.push_back(t.isend(right, step_tag(0, i + 1, j), data + off * es, len * es));
      else ag_sends.push_back(t.isend(right, step_tag(1, 0, j), data + off * es, len * es));
    }
  }
  // Segments sent above are received into below, so those sends must be
  // done; the allgather's first sends complete only once the peer posts its
  // allgather receives, so they are not waited for here.
  t.wait(sends, c.deadline);
  sends = std::move(ag_sends);
  // Allgather: at step i receive the finished segment r-i and forward it.
  for (int i = 0; i < W - 1; ++i) {
    const int q = mod(r - i);
    std::vector<RequestPtr> recvs;
    for (int64_t j = 0; j < K; ++j) {
      auto [off, len] = chunk(q, j);
      recvs.push_back(t.irecv(left, step_tag(1, i, j), data + off * es, len * es));
    }
    for (int64_t j = 0; j < K; ++j) {
      t.wait({&recvs[j], 1}, c.deadline);
      if (i + 1 < W - 1) {
        auto [off, len] = chunk(q, j);
        sends.push_back(t.isend(right, step_tag(1, i + 1, j), data + off * es, len * es));
      }
    }
  }
  t.wait(sends, c.deadline);
}

// Recursive doubling for any world: the first 2*(W - p) ranks fold pairwise
// into p = 2^floor(log2 W) participants, which exchange and combine
// (lower rank first, so every rank ends bitwise equal); folded-out ranks get
// the result at the end.
void recursive_doubling_allreduce(const Call& c, uint8_t* data, int64_t n, DType dt, ReduceKind k) {
  Transport& t = c.transport;
  const int W = t.size(), r = t.rank();
  const size_t bytes = n * dtype_size(dt);
  int p = 1;
  while (p * 2 <= W) p *= 2;
  const int rem = W - p;
  std::vector<uint8_t> tmp(bytes);
  int vr;  // rank among the p participants, or -1
  if (r < 2 * rem) {
    if (r % 2 == 0) {
      t.send(r + 1, tag(c, 0), data, bytes, c.deadline);
      vr = -1;
    } else {
      t.recv(r - 1, tag(c, 0), tmp.data(), bytes, c.deadline);
      reduce_pair(data, tmp.data(), data, n, dt, k);  // (r-1) op r
      vr = r / 2;
    }
  } else {
    vr = r - rem;
  }
  if (vr >= 0) {
    uint32_t step = 1;
    for (int mask = 1; mask < p; mask <<= 1, ++step) {
      const int pv = vr ^ mask;
      const int peer = pv < rem ? pv * 2 + 1 : pv + rem;
      exchange(c, peer, data, bytes, peer, tmp.data(), bytes, step);
      if (pv < vr) reduce_pair(data, tmp.data(), data, n, dt, k);
      else reduce_into(data, tmp.data(), n, dt, k);
    }
  }
  if (r < 2 * rem) {
    if (r % 2 == 1) t.send(r - 1, tag(c, 1000), data, bytes, c.deadline);
    else t.recv(r + 1, tag(c, 1000), data, bytes, c.deadline);
  }
}

OpDesc desc(const Call& c, OpKind k, DType dt, int64_t count, int root, ReduceKind redop) {
  return make_desc(c.seq, k, dt, count, root, redop);
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
  const int W = t.size();
  const DType dt = tv.dtype();
  const int64_t n = tv.numel();
  const size_t es = dtype_size(dt);
  check_args(c, desc(c, OpKind::kAllreduce, dt, n, -1, op.kind), true);
  uint8_t* data = bytes_of(tv);
  prepare_reduction(data, n, dt, op);
  if (W > 1 && static_cast<int64_t>(n * es) <= kRdBytes.get()) recursive_doubling_allreduce(c, data, n, dt, op.kind);
  else if (W > 1) ring_allreduce(c, data, n, dt, op.kind);
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
  copy_bytes(acc.data(), tv.data(), n * es);
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
    copy_bytes(tv.data(), acc.data(), n * es);
  }
}

void allgather(const Call& c, const TensorView& out, const TensorView& in) {
  Transport& t = c.transport;
  const int W = t.size(), r = t.rank();
  const int64_t m = in.numel();
  const size_t es = in.element_size();
  check_args(c, desc(c, OpKind::kAllgather, in.dtype(), m, -1, ReduceKind::kSum), true);
  uint8_t* dst = bytes_of(out);
  if (m > 0) copy_bytes(dst + r * m * es, in.data(), m * es);
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
  if (m > 0) copy_bytes(dst + r * m * es, in.data(), m * es);
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
  if (m > 0) copy_bytes(out.data(), src + r * m * es, m * es);
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
  if (!acc.empty()) copy_bytes(acc.data(), in.data(), acc.size());
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
  if (m > 0) copy_bytes(out.data(), acc.data() + r * m * es, m * es);
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
  if (in_splits[r] > 0) copy_bytes(dst + out_off[r] * es, src + in_off[r] * es, in_splits[r] * es);
  t.wait(reqs, c.deadline);
}

void barrier(const Call& c) {
  // The argument check is itself a dissemination barrier.
  check_args(c, desc(c, OpKind::kBarrier, DType::kU8, 0, -1, ReduceKind::kSum), true);
}

}  // namespace sinew::dist::net
