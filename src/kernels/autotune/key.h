// The tuning cache's key in two forms: a packed struct for the in-memory
// lookup on every dispatch (no strings, no allocation), and the string the
// file stores. The ISA, library version and candidate fingerprint are fixed
// within a process, so only the string carries them; entries of another
// ISA, version or candidate set are never loaded.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "sinew/kernels/gemm_problem.h"

namespace sinew::kernels::tune {

// What beta reads: nothing, the output (mm/bmm), or addmm's bias by kind.
enum class PriorKind : uint8_t { kNone, kOut, kRow, kCol, kMatrix };
const char* prior_kind_name(PriorKind k);  // "none", "out", "row", "col", "matrix"

struct PackedKey {
  uint8_t op = 0, in = 0, out = 0, layout_a = 0, layout_b = 0, align = 0, prior = 0;
  uint16_t threads = 0;
  int64_t batch = 0, m = 0, n = 0, k = 0;  // batch and m bucketed
  uint64_t epilogue = 0;                   // epilogue_signature()
  bool operator==(const PackedKey&) const = default;
};

struct PackedKeyHash {
  size_t operator()(const PackedKey& k) const;
};

PackedKey pack_key(const GemmProblem& p);

// A 64-bit hash of exactly what Epilogue::key() spells (0 for none),
// computed from the steps without building the string.
uint64_t epilogue_signature(const Epilogue* e);

// The largest power of two up to 64 dividing every operand's address and
// leading stride in bytes.
int operand_alignment(const GemmProblem& p);
PriorKind prior_kind(const GemmProblem& p);

// The file's key: every field of `k` spelled out, the epilogue by its key(),
// then ISA, threads, library version and candidate fingerprint.
std::string key_string(const PackedKey& k, const std::string& epilogue_key);

// The library version this build stamps on its entries.
const std::string& library_version();
// A hash of every listed candidate's id (and the cache version), as 12 hex digits.
const std::string& candidate_fingerprint();

}  // namespace sinew::kernels::tune
