// Paged KV storage (backend.h AttnSeq::blocks / block_size) in the CPU backend's
// kv_store and attention, against the same ops on linear per-sequence storage (checked
// against a double-precision reference in cpu_ops_test.cpp). Several sequences share one
// pool through shuffled block tables (their blocks interleave, out of order, with spare
// blocks between); history is stored in random chunks that cross block boundaries, every
// sequence in one kv_store call per round. Checked: every stored row sits at
// blocks[p / bs] * bs + p % bs with the bytes the linear store wrote at p; no other pool
// row changed (the pool starts as garbage); attention over the pool equals attention
// over the linear storage bit for bit (full and windowed, f32 and f16, with sinks).
// Reference kernel level and the default (SIMD) level, 1 and 3 threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/simd_backend.h"
#include "test_rng.h"

namespace brass::backend {
namespace {

using testing::Rng;

struct PagedCase {
  int64_t n_head, n_head_kv, d;
  int32_t window;
  DType kv_type;
  int32_t block_size;
};

void run_paged_case(Backend& be, Rng& rng, const PagedCase& c, const std::vector<std::pair<int32_t, int64_t>>& spec) {
  SCOPED_TRACE(::testing::Message() << "block " << c.block_size << " window " << c.window << " "
                                    << dtype_name(c.kv_type));
  const int64_t kv_row = c.n_head_kv * c.d, elt = c.kv_type == DType::F16 ? 2 : 4, row = kv_row * elt;
  const int64_t bs = c.block_size;
  const size_t n_seq = spec.size();
  // Block tables: a shuffled permutation of the pool, dealt out in sequence order.
  std::vector<int64_t> n_pos(n_seq), n_blk(n_seq);
  int64_t used = 0;
  for (size_t s = 0; s < n_seq; ++s) {
    n_pos[s] = spec[s].first + spec[s].second;
    n_blk[s] = (n_pos[s] + bs - 1) / bs;
    used += n_blk[s];
  }
  const int64_t n_blocks = used + 3;  // spare blocks nobody owns
  std::vector<int32_t> perm(n_blocks);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng.gen);
  std::vector<std::vector<int32_t>> tables(n_seq);
  for (size_t s = 0, next = 0; s < n_seq; ++s)
    for (int64_t b = 0; b < n_blk[s]; ++b) tables[s].push_back(perm[next++]);
  std::vector<uint8_t> kpool(n_blocks * bs * row, 0xAB), vpool(n_blocks * bs * row, 0xCD);
  std::vector<std::vector<uint8_t>> klin(n_seq), vlin(n_seq);
  std::vector<std::vector<float>> kall(n_seq), vall(n_seq);
  for (size_t s = 0; s < n_seq; ++s) {
    klin[s].assign(n_pos[s] * row, 0x11);
    vlin[s].assign(n_pos[s] * row, 0x22);
    kall[s] = rng.vec(n_pos[s] * kv_row, -2, 2);
    vall[s] = rng.vec(n_pos[s] * kv_row, -2, 2);
  }
  auto paged = [&](size_t s) {
    return AttnSeq{.k = kpool.data(), .v = vpool.data(), .capacity = static_cast<int32_t>(n_pos[s] + 5),
                   .blocks = tables[s].data(), .block_size = c.block_size};
  };
  auto linear = [&](size_t s) {
    return AttnSeq{.k = klin[s].data(), .v = vlin[s].data(), .capacity = static_cast<int32_t>(n_pos[s])};
  };
  // History [0, pos0): rounds of random chunks, every sequence with work in one call.
  std::vector<int64_t> done(n_seq, 0);
  int64_t crossings = 0;
  for (;;) {
    std::vector<float> kin, vin;
    std::vector<AttnSeq> ps, ls;
    for (size_t s = 0; s < n_seq; ++s) {
      const int64_t left = spec[s].first - done[s];
      if (left <= 0) continue;
      const int64_t n = std::min<int64_t>(left, rng.integer(1, static_cast<int>(std::max<int64_t>(2, 2 * bs))));
      if (done[s] / bs != (done[s] + n - 1) / bs) ++crossings;
      AttnSeq p = paged(s), l = linear(s);
      p.tok0 = l.tok0 = static_cast<int64_t>(kin.size()) / kv_row;
      p.n_tok = l.n_tok = n;
      p.pos0 = l.pos0 = static_cast<int32_t>(done[s]);
      kin.insert(kin.end(), kall[s].begin() + done[s] * kv_row, kall[s].begin() + (done[s] + n) * kv_row);
      vin.insert(vin.end(), vall[s].begin() + done[s] * kv_row, vall[s].begin() + (done[s] + n) * kv_row);
      ps.push_back(p);
      ls.push_back(l);
      done[s] += n;
    }
    if (ps.empty()) break;
    for (auto* seqs : {&ps, &ls})
      be.kv_store({.k = kin.data(), .v = vin.data(), .kv_type = c.kv_type, .n_head_kv = c.n_head_kv, .head_dim = c.d,
                   .seqs = *seqs});
  }
  // The chunk: stored and attended in one call each, all sequences.
  std::vector<float> kin, vin;
  std::vector<AttnSeq> ps, ls;
  int64_t tok = 0;
  for (size_t s = 0; s < n_seq; ++s) {
    const auto [pos0, n_tok] = spec[s];
    AttnSeq p = paged(s), l = linear(s);
    p.tok0 = l.tok0 = tok;
    p.n_tok = l.n_tok = n_tok;
    p.pos0 = l.pos0 = pos0;
    if (pos0 / bs != (pos0 + n_tok - 1) / bs) ++crossings;
    kin.insert(kin.end(), kall[s].begin() + pos0 * kv_row, kall[s].end());
    vin.insert(vin.end(), vall[s].begin() + pos0 * kv_row, vall[s].end());
    ps.push_back(p);
    ls.push_back(l);
    tok += n_tok;
  }
  for (auto* seqs : {&ps, &ls})
    be.kv_store({.k = kin.data(), .v = vin.data(), .kv_type = c.kv_type, .n_head_kv = c.n_head_kv, .head_dim = c.d,
                 .seqs = *seqs});
  EXPECT_GT(crossings, 0) << "no chunk crossed a block boundary";

  // Rows: where the rule says, with the linear store's bytes; nothing else touched.
  std::vector<uint8_t> touched(n_blocks * bs, 0);
  for (size_t s = 0; s < n_seq; ++s)
    for (int64_t p = 0; p < n_pos[s]; ++p) {
      const int64_t r = static_cast<int64_t>(tables[s][p / bs]) * bs + p % bs;
      ASSERT_EQ(r, kv_storage_row(paged(s), p));
      touched[r] = 1;
      ASSERT_EQ(0, std::memcmp(kpool.data() + r * row, klin[s].data() + p * row, row)) << "K seq " << s << " pos " << p;
      ASSERT_EQ(0, std::memcmp(vpool.data() + r * row, vlin[s].data() + p * row, row)) << "V seq " << s << " pos " << p;
    }
  for (int64_t r = 0; r < n_blocks * bs; ++r) {
    if (touched[r]) continue;
    for (int64_t b = 0; b < row; ++b) {
      ASSERT_EQ(kpool[r * row + b], 0xAB) << "pool row " << r << " was written";
      ASSERT_EQ(vpool[r * row + b], 0xCD) << "pool row " << r << " was written";
    }
  }

  std::vector<float> q = rng.vec(tok * c.n_head * c.d, -2, 2), sinks = rng.vec(c.n_head, -2, 2);
  std::vector<float> out_p(tok * c.n_head * c.d, 7.0f), out_l(out_p.size(), -7.0f);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.d));
  for (auto [seqs, out] : {std::pair{&ps, &out_p}, std::pair{&ls, &out_l}})
    be.attention({.q = q.data(), .sinks = sinks.data(), .out = out->data(), .kv_type = c.kv_type, .n_head = c.n_head,
                  .n_head_kv = c.n_head_kv, .head_dim = c.d, .window = c.window, .scale = scale, .seqs = *seqs});
  ASSERT_EQ(0, std::memcmp(out_p.data(), out_l.data(), out_p.size() * sizeof(float)))
      << "paged attention differs from linear attention";
}

class PagedKv : public ::testing::TestWithParam<std::tuple<int, bool>> {
 protected:
  std::unique_ptr<Backend> be = std::get<1>(GetParam())
                                    ? make_cpu_backend(std::get<0>(GetParam()))
                                    : cpu::make_cpu_backend_level(std::get<0>(GetParam()), cpu::KernelLevel::Ref);
};

TEST_P(PagedKv, StoreAndAttentionMatchLinearStorage) {
  Rng rng;
  SEED_TRACE(rng);
  for (int32_t bs : {1, 4, 16, 64})
    for (DType t : {DType::F32, DType::F16})
      for (int32_t window : {0, 7}) {
        const PagedCase c{.n_head = 4, .n_head_kv = 2, .d = 8, .window = window, .kv_type = t, .block_size = bs};
        // Decode rows and prefill chunks of several sequences, one call.
        run_paged_case(*be, rng, c, {{rng.integer(0, 150), 1}, {rng.integer(0, 90), rng.integer(2, 40)},
                                     {0, rng.integer(1, 70)}, {rng.integer(60, 130), 1},
                                     {rng.integer(40, 60), rng.integer(25, 40)}});  // crosses 64
        if (::testing::Test::HasFatalFailure()) return;
      }
}

INSTANTIATE_TEST_SUITE_P(ThreadsAndLevels, PagedKv,
                         ::testing::Combine(::testing::Values(1, 3), ::testing::Values(false, true)));

}  // namespace
}  // namespace brass::backend
