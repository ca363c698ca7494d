// The full-attention layers' block pool of KvCache (kv_cache.h), alone and through the model.
// - BlocksFollowRandomGrowthCutsAndRemovals: random interleaved appends / cuts / removals
//   of up to 5 sequences on a small pool, host and (FakeDevice) device storage. The test
//   keeps its own account: every sequence holds exactly ceil(length / block_size) blocks,
//   the pool's free count is the rest, a reserve succeeds exactly when the blocks it
//   needs are free (else a clear error and nothing changes), no block belongs to two
//   sequences, and every stored position of every sequence still reads the bytes written
//   for it (rows filled with a pattern naming sequence, layer, K/V, position, write).
// - InterleavedGrowthAndReuse: three sequences grown round-robin hold interleaved blocks;
//   a cut frees its blocks and the next growth reuses them; exhaustion names the sequence,
//   the blocks needed and the blocks free; removing everything returns the pool.
// - InterleavedBatchesMatchSoloRuns: 4 sequences decoded and prefilled in one batch per
//   round with staggered starts and chunk sizes (chunks crossing block boundaries, a
//   sequence removed mid-way whose blocks a later one reuses) give logits bit-identical to
//   each sequence run alone, with the same chunks, on a fresh model (CPU reference and
//   FakeDevice device tables; block sizes 16 and 64).
#include <gtest/gtest.h>

#include <map>
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

using brass::testing::FakeDevice;
using brass::testing::make_tiny;
using brass::testing::TempFile;
using brass::testing::TinySpec;

uint8_t pattern(int32_t seq, int64_t il, int kv, int64_t pos, int64_t gen, int64_t byte) {
  return static_cast<uint8_t>((seq * 17 + il * 131 + kv * 71 + pos * 29 + gen * 53 + byte * 7) % 251);
}

bool has(const std::string& msg, const std::string& what) { return msg.find(what) != std::string::npos; }

TEST(KvCachePool, BlocksFollowRandomGrowthCutsAndRemovals) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  auto uni = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  int64_t refused = 0, freed_by_cut = 0, interleaved = 0;
  for (int trial = 0; trial < 16; ++trial) {
    const bool device = trial % 2 == 1;
    GptOssConfig c;
    c.n_layer = uni(2, 4);
    c.n_head = 2;
    c.n_head_kv = uni(1, 2);
    c.head_dim = uni(1, 3) * 2;
    c.n_swa = uni(1, 6);
    c.n_ctx_train = 4096;
    KvCacheOptions o;
    o.type = trial % 4 < 2 ? DType::F32 : DType::F16;
    o.n_ctx_max = 300;
    o.max_chunk_tokens = uni(1, 8);
    o.block_size = int64_t{1} << uni(0, 4);
    o.pool_tokens = uni(30, 160);
    o.max_window_snapshots = static_cast<int32_t>(uni(0, 2));
    FakeDevice dev;
    if (device) o.device = &dev;
    SCOPED_TRACE(::testing::Message() << "trial " << trial << " block " << o.block_size << " pool " << o.pool_tokens
                                      << " chunk " << o.max_chunk_tokens << (device ? " device" : " host"));
    auto kvr = KvCache::create(c, o);
    ASSERT_TRUE(kvr.is_ok()) << kvr.status().message();
    KvCache kv = std::move(kvr).value();
    const int64_t bs = o.block_size;
    const int64_t n_blocks = (o.pool_tokens + bs - 1) / bs;
    ASSERT_EQ(kv.pool_blocks(), n_blocks);
    ASSERT_EQ(kv.pool_tokens(), n_blocks * bs);
    const int64_t free0 = kv.free_tokens();
    ASSERT_EQ(free0, kv.pool_tokens());
    const int64_t row = c.kv_dim() * kv.elt_bytes();

    std::map<int32_t, std::vector<int64_t>> gen_of;  // per live sequence: write generation of each position
    int64_t next_gen = 1;
    int32_t next_id = 0;
    auto blocks_of = [&](int64_t len) { return (len + bs - 1) / bs; };
    auto row_ptr = [&](int32_t id, int64_t il, int kv_i, int64_t pos) {
      backend::AttnSeq a = kv.view(id, il, 0, 0, 1);
      return static_cast<uint8_t*>(kv_i == 0 ? a.k : a.v) + backend::kv_storage_row(a, pos) * row;
    };
    auto check = [&]() {
      int64_t held = 0;
      std::set<int32_t> owned;
      for (auto& [id, gens] : gen_of) {
        const int64_t len = static_cast<int64_t>(gens.size());
        ASSERT_EQ(kv.length(id).value(), len);
        ASSERT_EQ(kv.held_blocks(id), blocks_of(len)) << "sequence " << id;
        held += blocks_of(len);
        backend::AttnSeq a = kv.view(id, 1, 0, 0, 1);  // layer 1: full attention
        ASSERT_EQ(a.block_size, bs);
        bool contiguous = true;
        for (int64_t b = 0; b < blocks_of(len); ++b) {
          const int32_t blk = a.blocks[b];
          ASSERT_GE(blk, 0);
          ASSERT_LT(blk, n_blocks);
          ASSERT_TRUE(owned.insert(blk).second) << "block " << blk << " is held twice";
          if (b > 0 && blk != a.blocks[b - 1] + 1) contiguous = false;
        }
        if (!contiguous) ++interleaved;
        for (int64_t il = 1; il < c.n_layer; il += 2)
          for (int kv_i = 0; kv_i < 2; ++kv_i)
            for (int64_t p = 0; p < len; ++p) {
              const uint8_t* r = row_ptr(id, il, kv_i, p);
              for (int64_t b = 0; b < row; ++b)
                ASSERT_EQ(r[b], pattern(id, il, kv_i, p, gens[p], b))
                    << "sequence " << id << " layer " << il << " position " << p << " byte " << b;
            }
      }
      ASSERT_EQ(kv.free_blocks(), n_blocks - held);
    };

    // Appends n_tok positions to sequence id (gens: its write generations) and sets taken,
    // unless the pool refuses them (then checks the refusal) or the context is full. (The
    // caller returns on a fatal failure: ASSERT leaves only this lambda.)
    auto append = [&](int32_t id, std::vector<int64_t>& gens, int64_t n_tok, bool& taken) {
      taken = false;
      const int64_t len = static_cast<int64_t>(gens.size());
      if (len + n_tok > o.n_ctx_max) return;
      const int64_t need = blocks_of(len + n_tok) - blocks_of(len);
      const int64_t free_before = kv.free_blocks();
      Status st = kv.reserve(id, len, n_tok);
      ASSERT_EQ(st.is_ok(), need <= free_before) << st.message();
      if (!st) {
        ++refused;
        EXPECT_TRUE(has(st.message(), "sequence " + std::to_string(id))) << st.message();
        EXPECT_TRUE(has(st.message(), std::to_string(need) + " more blocks")) << st.message();
        EXPECT_TRUE(has(st.message(), std::to_string(free_before) + " free")) << st.message();
        ASSERT_EQ(kv.free_blocks(), free_before);
        ASSERT_EQ(kv.held_blocks(id), blocks_of(len));
        return;
      }
      for (int64_t p = len; p < len + n_tok; ++p) {
        const int64_t g = next_gen++;
        gens.push_back(g);
        for (int64_t il = 1; il < c.n_layer; il += 2)
          for (int kv_i = 0; kv_i < 2; ++kv_i) {
            uint8_t* r = row_ptr(id, il, kv_i, p);
            for (int64_t b = 0; b < row; ++b) r[b] = pattern(id, il, kv_i, p, g, b);
          }
      }
      kv.commit(id, len + n_tok);
      taken = true;
    };
    for (int op = 0; op < 200; ++op) {
      const int what = static_cast<int>(uni(0, 9));
      if (gen_of.empty() || (what == 0 && gen_of.size() < 5)) {
        const int32_t id = next_id++;
        ASSERT_TRUE(kv.add_sequence(id).is_ok());
        gen_of[id];
      } else {
        auto it = gen_of.begin();
        std::advance(it, uni(0, static_cast<int64_t>(gen_of.size()) - 1));
        const int32_t id = it->first;
        std::vector<int64_t>& gens = it->second;
        const int64_t len = static_cast<int64_t>(gens.size());
        if (what == 1) {
          ASSERT_TRUE(kv.remove_sequence(id).is_ok());
          gen_of.erase(it);
        } else if (what <= 3) {  // cut where the rings allow it (full layers: anywhere)
          const int64_t n = kv.usable_cut(id, uni(0, len));
          const int64_t free_before = kv.free_blocks();
          ASSERT_TRUE(kv.truncate(id, n).is_ok());
          gens.resize(n);
          ASSERT_EQ(kv.free_blocks(), free_before + blocks_of(len) - blocks_of(n));
          if (blocks_of(n) < blocks_of(len)) ++freed_by_cut;
        } else {  // append a chunk
          bool taken = false;
          append(id, gens, uni(1, o.max_chunk_tokens), taken);
          if (::testing::Test::HasFatalFailure()) return;
          if (!taken) continue;
        }
      }
      check();
      if (::testing::Test::HasFatalFailure()) return;
    }
    // Then one sequence grows until the pool refuses it (the pool holds fewer positions
    // than n_ctx_max), so every trial takes the refusal path whatever the walk did.
    if (gen_of.empty()) {
      ASSERT_TRUE(kv.add_sequence(next_id).is_ok());
      gen_of[next_id++];
    }
    const int64_t refused_before = refused;
    for (auto& [id, gens] = *gen_of.begin(); refused == refused_before;) {
      bool taken = false;
      append(id, gens, o.max_chunk_tokens, taken);
      if (::testing::Test::HasFatalFailure()) return;
      if (!taken && refused == refused_before) break;  // context full
    }
    EXPECT_GT(refused, refused_before) << "the pool never refused a sequence past its size";
    check();
    if (::testing::Test::HasFatalFailure()) return;
    for (auto& [id, gens] : gen_of) ASSERT_TRUE(kv.remove_sequence(id).is_ok());
    EXPECT_EQ(kv.free_tokens(), free0) << "every block is back";
  }
  EXPECT_GT(refused, 0) << "the walk never exhausted the pool";
  EXPECT_GT(freed_by_cut, 0);
  EXPECT_GT(interleaved, 0) << "no sequence ever held non-adjacent blocks";
}

GptOssConfig tiny_config() {
  GptOssConfig c;
  c.n_layer = 4;
  c.n_head = 2;
  c.n_head_kv = 1;
  c.head_dim = 4;
  c.n_swa = 3;
  c.n_ctx_train = 4096;
  return c;
}

TEST(KvCachePool, InterleavedGrowthAndReuse) {
  const GptOssConfig c = tiny_config();
  KvCacheOptions o;
  o.n_ctx_max = 64;
  o.max_chunk_tokens = 16;
  o.block_size = 4;
  o.pool_tokens = 48;  // 12 blocks
  auto kvr = KvCache::create(c, o);
  ASSERT_TRUE(kvr.is_ok()) << kvr.status().message();
  KvCache kv = std::move(kvr).value();
  ASSERT_EQ(kv.free_tokens(), 48);
  for (int32_t id = 1; id <= 3; ++id) ASSERT_TRUE(kv.add_sequence(id).is_ok());
  EXPECT_EQ(kv.free_tokens(), 48) << "sequences take blocks only as they grow";
  for (int round = 0; round < 3; ++round)
    for (int32_t id = 1; id <= 3; ++id) {
      ASSERT_TRUE(kv.reserve(id, round * 4, 4).is_ok());
      kv.commit(id, round * 4 + 4);
    }
  EXPECT_EQ(kv.free_tokens(), 48 - 36);
  auto table = [&](int32_t id) {
    backend::AttnSeq a = kv.view(id, 1, 0, 0, 1);
    return std::vector<int32_t>(a.blocks, a.blocks + kv.held_blocks(id));
  };
  std::set<int32_t> all;
  for (int32_t id = 1; id <= 3; ++id) {
    const auto t = table(id);
    ASSERT_EQ(t.size(), 3u);
    all.insert(t.begin(), t.end());
    EXPECT_FALSE(t[1] == t[0] + 1 && t[2] == t[1] + 1) << "sequence " << id << " got adjacent blocks: not interleaved";
  }
  EXPECT_EQ(all.size(), 9u);
  // A cut frees the blocks past it; growing again reuses them.
  const auto t2 = table(2);
  ASSERT_TRUE(kv.truncate(2, 5).is_ok());  // n_swa 3: the ring still holds [3, 5)
  EXPECT_EQ(kv.held_blocks(2), 2);
  EXPECT_EQ(kv.free_tokens(), 48 - 32);
  ASSERT_TRUE(kv.reserve(2, 5, 7).is_ok());
  kv.commit(2, 12);
  EXPECT_EQ(table(2), t2) << "the block freed by the cut came back";
  EXPECT_EQ(kv.free_tokens(), 48 - 36);
  // Exhaustion: 3 free blocks, sequence 4 needs 4.
  ASSERT_TRUE(kv.add_sequence(4).is_ok());
  Status st = kv.reserve(4, 0, 16);
  ASSERT_FALSE(st.is_ok());
  EXPECT_TRUE(has(st.message(), "sequence 4")) << st.message();
  EXPECT_TRUE(has(st.message(), "4 more blocks")) << st.message();
  EXPECT_TRUE(has(st.message(), "3 free (of 12)")) << st.message();
  EXPECT_EQ(kv.free_tokens(), 12);
  EXPECT_EQ(kv.held_blocks(4), 0);
  ASSERT_TRUE(kv.reserve(4, 0, 12).is_ok());
  EXPECT_EQ(kv.free_tokens(), 0);
  // bytes(): rings + held blocks.
  const int64_t row = c.kv_dim() * 4;
  EXPECT_EQ(kv.bytes(4).value(), 2 * 2 * kv.ring_capacity() * row + 2 * 2 * 12 * row);
  for (int32_t id = 1; id <= 4; ++id) ASSERT_TRUE(kv.remove_sequence(id).is_ok());
  EXPECT_EQ(kv.free_tokens(), 48);
}

TEST(KvCachePool, OptionsAreValidatedAndTheAutomaticSizeFollowsMemory) {
  const GptOssConfig c = tiny_config();
  for (int64_t bad : {0, 3, 48, -4}) {
    KvCacheOptions o;
    o.block_size = bad;
    auto kv = KvCache::create(c, o);
    ASSERT_FALSE(kv.is_ok()) << bad;
    EXPECT_TRUE(has(kv.status().message(), "power of two")) << kv.status().message();
    EXPECT_TRUE(has(kv.status().message(), std::to_string(bad))) << kv.status().message();
  }
  KvCacheOptions neg;
  neg.pool_tokens = -1;
  EXPECT_FALSE(KvCache::create(c, neg).is_ok());
  KvCacheOptions one;
  one.pool_tokens = 1;
  EXPECT_EQ(KvCache::create(c, one).value().pool_tokens(), 64) << "rounded up to a whole block";
  // Automatic: half the device's free memory, at most 16 contexts. A position costs
  // 2 full layers x K/V x kv_dim 4 x 2 bytes (f16) = 32 bytes.
  FakeDevice dev;
  dev.mem = {.free_bytes = 1 << 20, .total_bytes = 2 << 20};
  KvCacheOptions a;
  a.type = DType::F16;
  a.device = &dev;
  a.n_ctx_max = 4096;
  a.block_size = 16;
  EXPECT_EQ(KvCache::create(c, a).value().pool_tokens(), (1 << 19) / 32);  // memory-bound
  a.n_ctx_max = 100;
  EXPECT_EQ(KvCache::create(c, a).value().pool_tokens(), 1600);  // 16 contexts of 100
}

// ---- through the model ----

struct Script {
  int start = 0;                // first round
  std::vector<int64_t> chunks;  // chunk sizes, one per round from `start`
  int remove_after = -1;        // remove the sequence after this many chunks (-1: never)
  std::vector<int32_t> tokens;
};

TEST(KvCachePool, InterleavedBatchesMatchSoloRuns) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  TempFile file("model");
  ASSERT_TRUE(make_tiny(TinySpec{}, seed).write(file.path).is_ok());
  std::mt19937 rng(seed);
  auto uni = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  for (int variant = 0; variant < 4; ++variant) {
    const int64_t bs = variant < 2 ? 16 : 64;
    const bool device = variant % 2 == 1;
    SCOPED_TRACE(::testing::Message() << "block " << bs << (device ? " device" : " host"));
    ModelOptions o;
    o.n_threads = 1;
    o.n_ctx = 512;
    o.max_chunk_tokens = 40;
    o.kv_block_size = bs;
    o.use_graphs = false;
    // Scripts: a prompt of a few chunks, then decode tokens; sequence 4 starts once 0 is
    // gone. Sequence 1's second chunk crosses position 64 (a block boundary for both sizes).
    std::vector<Script> sc(5);
    std::vector<int64_t> blocks(5);
    for (int i = 0; i < 5; ++i) {
      sc[i].start = i < 4 ? static_cast<int>(uni(0, 6)) : 0;
      const int n_prompt = static_cast<int>(uni(1, 3));
      for (int k = 0; k < n_prompt; ++k) sc[i].chunks.push_back(uni(2, 40));
      if (i == 1) sc[i].chunks = {uni(25, 40), 40};
      const int n_dec = static_cast<int>(uni(10, 30));
      for (int k = 0; k < n_dec; ++k) sc[i].chunks.push_back(1);
      int64_t len = 0;
      for (int64_t n : sc[i].chunks) len += n;
      sc[i].tokens.resize(len);
      for (auto& t : sc[i].tokens) t = static_cast<int32_t>(uni(0, 95));
      blocks[i] = (len + bs - 1) / bs;
    }
    sc[0].remove_after = static_cast<int>(sc[0].chunks.size()) - static_cast<int>(uni(1, 5));
    // Enough for 1, 2, 3 and one of 0 / 4 at their full lengths (0 never grows past
    // remove_after, so this is a bound): 4 takes freed blocks before any untouched one.
    o.kv_tokens = (blocks[1] + blocks[2] + blocks[3] + std::max(blocks[0], blocks[4])) * bs;
    auto load = [&](FakeDevice** dev_out) -> std::unique_ptr<Model> {
      auto reader = gguf::Reader::open(file.path);
      EXPECT_TRUE(reader.is_ok());
      std::unique_ptr<backend::Backend> be = backend::make_cpu_backend(1);
      if (device) {
        auto d = std::make_unique<FakeDevice>(std::move(be));
        if (dev_out) *dev_out = d.get();
        be = std::move(d);
      }
      auto m = Model::load(std::move(reader).value(), o, std::move(be));
      EXPECT_TRUE(m.is_ok()) << m.status().message();
      return m.is_ok() ? std::move(m).value() : nullptr;
    };
    FakeDevice* dev = nullptr;
    auto mixed = load(&dev);
    ASSERT_TRUE(mixed);
    // Interleaved run: every round, each active sequence's next chunk in one batch.
    std::vector<std::vector<float>> got(5);
    std::vector<size_t> next(5, 0);
    std::vector<int64_t> pos(5, 0);
    std::vector<bool> live(5, false);
    int64_t crossings = 0, interleaved = 0;
    std::set<int32_t> freed;
    bool reused = false;
    for (int round = 0;; ++round) {
      std::vector<SeqChunk> batch;
      std::vector<int> who;
      bool any_left = false;
      // (4 right after 0: its first chunk reserves before 1..3 may take 0's freed blocks)
      for (int i : {0, 4, 1, 2, 3}) {
        const bool finished = next[i] >= sc[i].chunks.size() ||
                              (sc[i].remove_after >= 0 && static_cast<int>(next[i]) >= sc[i].remove_after);
        if (finished) {
          if (live[i]) {
            if (next[4] == 0) {  // blocks freed before 4 first reserves
              backend::AttnSeq a = mixed->kv_cache().view(i, 1, 0, 0, 1);
              for (int64_t b = 0; b < mixed->kv_cache().held_blocks(i); ++b) freed.insert(a.blocks[b]);
            }
            ASSERT_TRUE(mixed->remove_sequence(i).is_ok());
            live[i] = false;
          }
          continue;
        }
        any_left = true;
        if (round < sc[i].start || (i == 4 && (live[0] || next[0] == 0))) continue;
        if (!live[i]) {
          ASSERT_TRUE(mixed->add_sequence(i).is_ok());
          live[i] = true;
        }
        const int64_t n = sc[i].chunks[next[i]];
        if (pos[i] / bs != (pos[i] + n - 1) / bs) ++crossings;
        batch.push_back({.seq_id = i,
                         .tokens = std::span<const int32_t>(sc[i].tokens).subspan(pos[i], n),
                         .pos0 = static_cast<int32_t>(pos[i]),
                         .all_logits = true});
        who.push_back(i);
      }
      if (!any_left) break;
      if (batch.empty()) continue;
      ForwardOutput out;
      Status st = mixed->forward(batch, out);
      ASSERT_TRUE(st.is_ok()) << st.message();
      for (size_t b = 0; b < who.size(); ++b) {
        const int i = who[b];
        got[i].insert(got[i].end(), out.row(b), out.row(b) + out.n_rows[b] * out.n_vocab);
        pos[i] += sc[i].chunks[next[i]++];
        backend::AttnSeq a = mixed->kv_cache().view(i, 1, 0, 0, 1);
        const int64_t held = mixed->kv_cache().held_blocks(i);
        ASSERT_EQ(held, (pos[i] + bs - 1) / bs);
        for (int64_t k = 1; k < held; ++k)
          if (a.blocks[k] != a.blocks[k - 1] + 1) ++interleaved;
        if (i == 4)
          for (int64_t k = 0; k < held; ++k) reused |= freed.count(a.blocks[k]) != 0;
      }
    }
    EXPECT_GT(crossings, 0) << "no chunk crossed a block boundary";
    if (bs == 16) EXPECT_GT(interleaved, 0) << "the sequences' blocks never interleaved";
    EXPECT_TRUE(reused) << "sequence 4 reused no block of the sequences removed before it";
    EXPECT_EQ(mixed->kv_cache().free_tokens(), mixed->kv_cache().pool_tokens());
    if (dev) EXPECT_GT(dev->uploads, 0);
    // Solo runs: same chunks, one sequence per fresh model.
    for (int i = 0; i < 5; ++i) {
      auto solo = load(nullptr);
      ASSERT_TRUE(solo);
      ASSERT_TRUE(solo->add_sequence(i).is_ok());
      std::vector<float> want;
      int64_t p = 0;
      for (size_t k = 0; k < next[i]; ++k) {
        const int64_t n = sc[i].chunks[k];
        SeqChunk ch{.seq_id = i, .tokens = std::span<const int32_t>(sc[i].tokens).subspan(p, n),
                    .pos0 = static_cast<int32_t>(p), .all_logits = true};
        ForwardOutput out;
        ASSERT_TRUE(solo->forward({&ch, 1}, out).is_ok());
        want.insert(want.end(), out.logits.begin(), out.logits.end());
        p += n;
      }
      ASSERT_EQ(got[i].size(), want.size()) << "sequence " << i;
      EXPECT_EQ(0, std::memcmp(got[i].data(), want.data(), want.size() * sizeof(float)))
          << "sequence " << i << ": interleaved logits differ from the solo run";
    }
  }
}

TEST(KvCachePool, ForwardRefusesABatchThePoolCannotHold) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  TempFile file("model");
  ASSERT_TRUE(make_tiny(TinySpec{}, seed).write(file.path).is_ok());
  ModelOptions o;
  o.n_threads = 1;
  o.n_ctx = 256;
  o.kv_block_size = 16;
  o.kv_tokens = 48;  // 3 blocks
  auto mr = Model::load(file.path, o);
  ASSERT_TRUE(mr.is_ok()) << mr.status().message();
  Model& m = *mr.value();
  std::vector<int32_t> a(33, 5), b(10, 7);
  ASSERT_TRUE(m.add_sequence(0).is_ok());
  ASSERT_TRUE(m.add_sequence(1).is_ok());
  ForwardOutput out;
  ASSERT_TRUE(m.forward(std::vector<SeqChunk>{{.seq_id = 0, .tokens = std::span(a).first(20), .pos0 = 0}}, out).is_ok());
  // 0 grows to 33 positions (a third block) and 1 takes one: 2 needed, 1 free.
  Status st = m.forward(std::vector<SeqChunk>{{.seq_id = 0, .tokens = std::span(a).subspan(20), .pos0 = 20},
                                              {.seq_id = 1, .tokens = b, .pos0 = 0}},
                        out);
  ASSERT_FALSE(st.is_ok());
  EXPECT_TRUE(has(st.message(), "needs 2 more KV blocks of 16 positions but the pool has 1 free (of 3)"))
      << st.message();
  EXPECT_EQ(m.sequence_length(0).value(), 20);
  EXPECT_EQ(m.sequence_length(1).value(), 0);
  EXPECT_EQ(m.kv_cache().free_blocks(), 1);
  std::vector<int32_t> picks;
  st = m.decode_greedy(0, 3, 29, picks);  // 20 + 29 = 49 positions: 2 more blocks
  EXPECT_TRUE(has(st.message(), "need 2 more KV blocks")) << st.message();
  EXPECT_TRUE(has(st.message(), "pool has 1 free")) << st.message();
  EXPECT_EQ(m.sequence_length(0).value(), 20);
  ASSERT_TRUE(m.forward(std::vector<SeqChunk>{{.seq_id = 1, .tokens = b, .pos0 = 0}}, out).is_ok());
  ASSERT_TRUE(m.remove_sequence(1).is_ok());
  EXPECT_EQ(m.kv_cache().free_blocks(), 1);
  ASSERT_TRUE(m.decode_greedy(0, 3, 13, picks).is_ok());  // 33 positions: the third block
  EXPECT_EQ(m.kv_cache().free_blocks(), 0);
}

}  // namespace
}  // namespace brass::model
