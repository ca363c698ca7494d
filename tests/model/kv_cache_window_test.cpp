// KvCache truncation rule and window snapshots (kv_cache.h), host and device storage.
// - RandomOpsAgreeWithASlotSimulation: random appends / snapshots / cuts on a KvCache
//   alone, its rows filled with bytes that name (layer, K or V, position, write
//   generation). The test keeps its own simulation of what every ring slot holds
//   (slot -> (position, generation), updated on every write; a cut invalidates nothing,
//   the truth is simply what the slots contain) and of the logical sequence; a cut at n
//   is expected possible exactly when every position the next query needs sits in its
//   slot with the current generation, or a snapshot at n was kept. usable_cut() and
//   truncate() must both agree with that, for every n of every state, and after a cut
//   the storage must hold the right bytes for every position still needed.
// - RestoredWindowContinuesLikeAFreshRun: a tiny random model; sequence A reads prompt
//   P, snapshots, reads a long continuation (the rings wrap far past P), is cut back
//   to |P| and reads Y; sequence B reads P then Y. Same chunking, same kernels: the
//   logits must be bit-identical. Without a snapshot the same cut is refused.
// "Device" storage is a FakeDevice backend: host memory that KvCache may only reach
// through alloc / upload / download (host_memory() false); for the model test it
// forwards every op to the CPU backend, so the model's device path runs on the CPU.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <set>

#include "backend/backend.h"
#include "gguf/reader.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "fake_device.h"
#include "tiny_model.h"

namespace brass::model {
namespace {

using brass::testing::make_tiny;
using brass::testing::TempFile;
using brass::testing::TinySpec;

using brass::testing::FakeDevice;

// ---- the KvCache alone against a slot simulation ----

struct Sim {
  // What the test believes: the logical sequence (generation of each position) and,
  // per ring slot, the (position, generation) last written there.
  std::vector<int64_t> gen_of;                     // (length)
  std::vector<std::pair<int64_t, int64_t>> slots;  // (ring capacity)
  std::vector<std::pair<int64_t, std::vector<int64_t>>> snaps;  // (at, generations of [0, at))
};

uint8_t pattern(int64_t il, int kv, int64_t pos, int64_t gen, int64_t byte) {
  return static_cast<uint8_t>((il * 131 + kv * 71 + pos * 29 + gen * 53 + byte * 7) % 251);
}

TEST(KvCacheWindow, RandomOpsAgreeWithASlotSimulation) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  auto uni = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  int64_t n_cuts = 0, n_refused = 0, n_restores = 0;
  for (int trial = 0; trial < 24; ++trial) {
    const bool device = trial % 2 == 1;
    GptOssConfig c;
    c.n_layer = uni(1, 4);
    c.n_head = 2;
    c.n_head_kv = uni(1, 2);
    c.head_dim = uni(1, 3) * 2;
    c.n_swa = uni(1, 9);
    c.n_ctx_train = 4096;
    KvCacheOptions o;
    o.type = trial % 4 < 2 ? DType::F32 : DType::F16;
    o.n_ctx_max = 400;
    o.max_chunk_tokens = uni(1, 6);
    o.max_window_snapshots = static_cast<int32_t>(uni(0, 3));
    o.block_size = int64_t{1} << uni(0, 5);
    o.pool_tokens = o.n_ctx_max;
    FakeDevice dev;
    if (device) o.device = &dev;
    auto kvr = KvCache::create(c, o);
    ASSERT_TRUE(kvr.is_ok()) << kvr.status().message();
    KvCache kv = std::move(kvr).value();
    SCOPED_TRACE(::testing::Message() << "trial " << trial << " n_layer " << c.n_layer << " n_swa " << c.n_swa
                                      << " chunk " << o.max_chunk_tokens << " snaps " << o.max_window_snapshots
                                      << " block " << o.block_size
                                      << (device ? " device" : " host"));
    const int64_t cap = kv.ring_capacity();
    ASSERT_EQ(cap, c.n_swa + o.max_chunk_tokens - 1);
    const int64_t row = c.kv_dim() * kv.elt_bytes();
    ASSERT_TRUE(kv.add_sequence(5).is_ok());
    Sim sim;
    sim.slots.assign(cap, {-1, -1});
    int64_t next_gen = 1;

    auto storage = [&](int64_t il, int kv_i, int64_t pos) {
      backend::AttnSeq a = kv.view(5, il, 0, 0, 1);
      EXPECT_EQ(a.ring, c.is_swa_layer(il));
      EXPECT_EQ(a.block_size, a.ring ? 0 : o.block_size);
      const int64_t slot = backend::kv_storage_row(a, pos);  // (paged full layers: FakeDevice tables are host-readable)
      return static_cast<uint8_t*>(kv_i == 0 ? a.k : a.v) + slot * row;
    };
    // The independent rule: every position [max(0, n - n_swa + 1), n) is in its slot
    // with the generation the logical sequence has there.
    auto ring_ok = [&](int64_t n) {
      for (int64_t p = std::max<int64_t>(0, n - c.n_swa + 1); p < n; ++p)
        if (sim.slots[p % cap] != std::make_pair(p, sim.gen_of[p])) return false;
      return true;
    };
    auto expected_cut = [&](int64_t n) -> int64_t {
      if (ring_ok(n)) return n;
      int64_t best = 0;
      for (auto& s : sim.snaps)
        if (s.first <= n) best = std::max(best, s.first);
      return best;
    };
    auto check_bytes = [&](int64_t len) -> bool {
      for (int64_t il = 0; il < c.n_layer; ++il) {
        const int64_t lo = c.is_swa_layer(il) ? std::max<int64_t>(0, len - c.n_swa + 1) : 0;
        for (int64_t p = lo; p < len; ++p)
          for (int kv_i = 0; kv_i < 2; ++kv_i) {
            const uint8_t* r = storage(il, kv_i, p);
            for (int64_t b = 0; b < row; ++b)
              if (r[b] != pattern(il, kv_i, p, sim.gen_of[p], b)) {
                ADD_FAILURE() << "layer " << il << (kv_i ? " V" : " K") << " position " << p << " byte " << b
                              << " is wrong after the cut to " << len;
                return false;
              }
          }
      }
      return true;
    };

    for (int op = 0; op < 80; ++op) {
      const int64_t len = kv.length(5).value();
      ASSERT_EQ(len, static_cast<int64_t>(sim.gen_of.size()));
      // The rule vs the simulation for every n, and truncate vs the rule on a sample.
      for (int64_t n = 0; n <= len; ++n) {
        ASSERT_EQ(kv.usable_cut(5, n), n == 0 ? 0 : expected_cut(n)) << "n " << n << " length " << len;
      }
      const int what = static_cast<int>(uni(0, 9));
      if (what < 5 || len == 0) {  // append a chunk
        const int64_t n_tok = uni(1, o.max_chunk_tokens);
        if (len + n_tok > o.n_ctx_max) break;
        ASSERT_TRUE(kv.reserve(5, len, n_tok).is_ok());
        for (int64_t p = len; p < len + n_tok; ++p) {
          const int64_t g = next_gen++;
          sim.gen_of.push_back(g);
          sim.slots[p % cap] = {p, g};
          for (int64_t il = 0; il < c.n_layer; ++il)
            for (int kv_i = 0; kv_i < 2; ++kv_i) {
              uint8_t* r = storage(il, kv_i, p);
              for (int64_t b = 0; b < row; ++b) r[b] = pattern(il, kv_i, p, g, b);
            }
        }
        kv.commit(5, len + n_tok);
      } else if (what < 7) {  // snapshot
        ASSERT_TRUE(kv.snapshot_window(5).is_ok());
        if (o.max_window_snapshots > 0 &&
            std::none_of(sim.snaps.begin(), sim.snaps.end(), [&](auto& s) { return s.first == len; })) {
          sim.snaps.push_back({len, sim.gen_of});
          if (static_cast<int64_t>(sim.snaps.size()) > o.max_window_snapshots) sim.snaps.erase(sim.snaps.begin());
        }
        std::vector<int64_t> want;
        for (auto& s : sim.snaps) want.push_back(s.first);
        ASSERT_EQ(kv.snapshot_lengths(5), want);
        // bytes(): storage + every snapshot's window.
        int64_t b = 0;
        // Full layers: whole blocks covering [0, len).
        const int64_t blocks = (len + o.block_size - 1) / o.block_size;
        for (int64_t il = 0; il < c.n_layer; ++il) b += 2 * row * (c.is_swa_layer(il) ? cap : blocks * o.block_size);
        for (auto& s : sim.snaps)
          b += c.n_swa_layers() * 2 * row * (s.first - std::max<int64_t>(0, s.first - c.n_swa + 1));
        ASSERT_EQ(kv.bytes(5).value(), b);
        ASSERT_EQ(kv.free_blocks(), kv.pool_blocks() - blocks);
      } else {  // cut: a random n, or a snapshot length
        int64_t n = uni(0, len);
        if (!sim.snaps.empty() && uni(0, 1)) n = sim.snaps[uni(0, sim.snaps.size() - 1)].first;
        const bool want_ok = n == len || n == 0 || expected_cut(n) == n;
        const bool via_snapshot = want_ok && n != len && n != 0 && !ring_ok(n);
        const int64_t up0 = dev.uploads;
        Status st = kv.truncate(5, n);
        ASSERT_EQ(st.is_ok(), want_ok) << "cut to " << n << " of " << len << ": " << st.message();
        if (!st) {
          ++n_refused;
          EXPECT_NE(st.message().find("snapshot"), std::string::npos) << st.message();
          continue;
        }
        ++n_cuts;
        if (via_snapshot) {
          ++n_restores;
          if (device) EXPECT_GT(dev.uploads, up0);
          // The snapshot's window is now in the slots (the ring had lost it).
          for (auto& s : sim.snaps)
            if (s.first == n)
              for (int64_t p = std::max<int64_t>(0, n - c.n_swa + 1); p < n; ++p) sim.slots[p % cap] = {p, s.second[p]};
        }
        sim.gen_of.resize(n);
        sim.snaps.erase(std::remove_if(sim.snaps.begin(), sim.snaps.end(), [&](auto& s) { return s.first > n; }),
                        sim.snaps.end());
        ASSERT_TRUE(check_bytes(n));
      }
    }
    // (n_swa 1: the window before a position is empty, nothing to copy.)
    if (device && o.max_window_snapshots > 0 && c.n_swa > 1) EXPECT_GT(dev.downloads, 0);
  }
  // The random walk must have exercised every branch.
  EXPECT_GT(n_cuts, 20);
  EXPECT_GT(n_refused, 5);
  EXPECT_GT(n_restores, 5);
  std::printf("cuts %lld, refused %lld, restored from a snapshot %lld\n", static_cast<long long>(n_cuts),
              static_cast<long long>(n_refused), static_cast<long long>(n_restores));
}

// ---- through the model ----

TEST(KvCacheWindow, RestoredWindowContinuesLikeAFreshRun) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  TempFile file("model");
  ASSERT_TRUE(make_tiny(TinySpec{}, seed).write(file.path).is_ok());
  std::mt19937 rng(seed);
  auto toks = [&](int n) {
    std::vector<int32_t> t(n);
    for (auto& x : t) x = std::uniform_int_distribution<int>(0, 95)(rng);
    return t;
  };
  for (int variant = 0; variant < 4; ++variant) {
    const bool device = variant % 2 == 1;
    ModelOptions o;
    o.n_threads = 1;
    o.n_ctx = 256;
    o.max_chunk_tokens = 4;
    o.kv_type = variant < 2 ? DType::F32 : DType::F16;
    o.use_graphs = false;
    SCOPED_TRACE(::testing::Message() << (device ? "device" : "host") << " kv " << dtype_name(o.kv_type));
    auto reader = gguf::Reader::open(file.path);
    ASSERT_TRUE(reader.is_ok()) << reader.status().message();
    FakeDevice* dev = nullptr;
    std::unique_ptr<backend::Backend> be = backend::make_cpu_backend(1);
    if (device) {
      auto d = std::make_unique<FakeDevice>(std::move(be));
      dev = d.get();
      be = std::move(d);
    }
    auto mr = Model::load(std::move(reader).value(), o, std::move(be));
    ASSERT_TRUE(mr.is_ok()) << mr.status().message();
    Model& m = *mr.value();
    const int64_t n_swa = m.config().n_swa, cap = m.kv_cache().ring_capacity();
    const auto p = toks(21), x = toks(40), y = toks(13);
    ASSERT_GT(static_cast<int64_t>(p.size() + x.size()) - cap, static_cast<int64_t>(p.size()) - n_swa + 1)
        << "the continuation must push P's window out of the rings";
    ForwardOutput out_a, out_b, tmp;
    auto run = [&](int32_t id, const std::vector<int32_t>& t, int32_t pos0, bool all, ForwardOutput& out) {
      SeqChunk ch{id, t, pos0, all};
      Status s = m.forward({&ch, 1}, out);
      ASSERT_TRUE(s.is_ok()) << s.message();
    };
    const int32_t lp = static_cast<int32_t>(p.size());
    // A: P, snapshot, X, cut back to |P|, Y.
    ASSERT_TRUE(m.add_sequence(1).is_ok());
    run(1, p, 0, false, tmp);
    const int64_t down0 = dev ? dev->downloads : 0;
    ASSERT_TRUE(m.kv_cache().snapshot_window(1).is_ok());
    if (dev) EXPECT_GT(dev->downloads, down0);
    run(1, x, lp, false, tmp);
    EXPECT_EQ(m.kv_cache().usable_cut(1, lp + 5), lp);  // past the ring: back to the snapshot
    ASSERT_TRUE(m.truncate_sequence(1, lp).is_ok());
    run(1, y, lp, true, out_a);
    // B: P, Y from scratch (same chunks).
    ASSERT_TRUE(m.add_sequence(2).is_ok());
    run(2, p, 0, false, tmp);
    run(2, y, lp, true, out_b);
    ASSERT_EQ(out_a.logits.size(), out_b.logits.size());
    ASSERT_EQ(out_a.logits.size(), y.size() * 96);
    EXPECT_EQ(0, std::memcmp(out_a.logits.data(), out_b.logits.data(), out_a.logits.size() * sizeof(float)))
        << "logits after the restored window differ from a fresh run";
    // C: the same history without a snapshot cannot be cut there.
    ASSERT_TRUE(m.add_sequence(3).is_ok());
    run(3, p, 0, false, tmp);
    run(3, x, lp, false, tmp);
    EXPECT_EQ(m.kv_cache().usable_cut(3, lp), 0);
    EXPECT_FALSE(m.truncate_sequence(3, lp).is_ok());
    // The cut dropped nothing it needed: A's snapshot at |P| is still there; B's bytes
    // count its own snapshot-free storage only.
    EXPECT_EQ(m.kv_cache().snapshot_lengths(1), std::vector<int64_t>{lp});
    EXPECT_EQ(m.kv_cache().bytes(1).value() - m.kv_cache().bytes(2).value(), m.kv_cache().window_snapshot_bytes())
        << "a snapshot of a window of n_swa - 1 = " << n_swa - 1 << " positions";
  }
}

}  // namespace
}  // namespace brass::model
