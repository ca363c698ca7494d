// Model: a loaded gpt-oss GGUF (config + bound weights + backend + KV cache) and its
// forward pass over a BATCH of sequence chunks. Prefilling a whole prompt is one
// forward call (matrix-matrix work); decoding is the same call with one token per
// sequence; prefill chunks and decode tokens of many sequences mix in one call.
// Chunks longer than max_chunk_tokens are split into rounds internally.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/dtype.h"
#include "core/status.h"
#include "model/config.h"
#include "model/kv_cache.h"
#include "model/rope.h"
#include "model/weights.h"

namespace brass::gguf {
class Reader;
}

namespace brass::model {

struct ModelOptions {
  int n_threads = 0;               // CPU threads; 0: env::threads() (BRASS_THREADS or all cores)
  DType kv_type = DType::F32;      // F32 (reference) or F16
  int64_t n_ctx = 0;               // per-sequence context limit; 0: context_length
  int64_t max_chunk_tokens = 512;  // tokens per sequence per internal forward round
  bool yarn_rounded = false;       // llama.cpp's floor/ceil YaRN range (see rope.h)
  bool use_graphs = true;          // capture decode steps (single and batched; backends that can)
  // Full-attention layers' KV block pool (kv_cache.h): positions it holds across all
  // sequences (0: automatic, KvCacheOptions::pool_tokens) and positions per block.
  int64_t kv_tokens = 0;
  int64_t kv_block_size = 64;
};

// `tokens` sit at positions pos0 .. pos0 + size - 1; pos0 must equal the sequence's
// current length. Logits are returned for the last token, or for every token when
// all_logits.
struct SeqChunk {
  int32_t seq_id = 0;
  std::span<const int32_t> tokens;
  int32_t pos0 = 0;
  bool all_logits = false;
  // The chunk's last row is picked greedily on the backend (argmax, ties: the lower index)
  // and only the token comes back (ForwardOutput::token): no logits row for this chunk.
  // Ignored with all_logits.
  bool greedy = false;
  // Non-null: the chunk's last row is sampled on the backend with these parameters
  // (backend::SampleArgs; temperature <= 0 is greedy) and only the token comes back, as
  // with greedy. Read during forward() only. Ignored with all_logits.
  const backend::SampleParams* sample = nullptr;
  // Model::submit only: the chunk's one token is the pick this sequence got in the previous
  // submitted round, taken on the backend (it may not have come back yet); `tokens` must be
  // empty.
  bool feed = false;
};

struct ForwardOutput {
  int64_t n_vocab = 0;
  std::vector<float> logits;   // (total rows, n_vocab), chunks in batch order
  std::vector<int64_t> row0;   // per chunk: its first row
  std::vector<int64_t> n_rows; // per chunk: 1, its token count when all_logits, 0 when greedy
  std::vector<int32_t> token;  // per chunk: the pick of a `greedy` or `sample` chunk, else -1
  const float* row(size_t chunk, int64_t i = 0) const {
    return logits.data() + (row0[chunk] + i) * n_vocab;
  }
};

class Model {
 public:
  static Result<std::unique_ptr<Model>> load(const std::string& path, const ModelOptions& o = {});
  static Result<std::unique_ptr<Model>> load(std::unique_ptr<gguf::Reader> reader,
                                             const ModelOptions& o = {});
  // On a given backend (e.g. backend::make_cuda_backend()). Device backends get every
  // weight through prepare_weight (copied once) and a device-resident KV cache.
  static Result<std::unique_ptr<Model>> load(std::unique_ptr<gguf::Reader> reader, const ModelOptions& o,
                                             std::unique_ptr<backend::Backend> be);
  ~Model();

  const GptOssConfig& config() const { return cfg_; }
  const GptOssWeights& weights() const { return w_; }
  const gguf::Reader& reader() const { return *reader_; }
  const RopeFreqs& rope() const { return rope_; }
  backend::Backend& backend() { return *be_; }
  KvCache& kv_cache() { return kv_; }
  std::string summary() const;

  // max_len > 0: the sequence never grows past max_len positions (see KvCache::add_sequence).
  Status add_sequence(int32_t seq_id, int64_t max_len = 0) { return kv_.add_sequence(seq_id, max_len); }
  Status remove_sequence(int32_t seq_id) {
    fwd_graphs_.erase(seq_id);
    greedy_graphs_.erase(seq_id);
    pick_rows_.erase(seq_id);
    return kv_.remove_sequence(seq_id);
  }
  Status truncate_sequence(int32_t seq_id, int64_t n) {
    pick_rows_.erase(seq_id);
    return kv_.truncate(seq_id, n);
  }
  Result<int64_t> sequence_length(int32_t seq_id) const { return kv_.length(seq_id); }

  // Run the batch. Invalid input (unknown sequence, wrong pos0, bad token id, context
  // overflow, more new KV blocks than the pool has free) is reported before anything is
  // computed or any sequence changes.
  Status forward(std::span<const SeqChunk> batch, ForwardOutput& out);

  // Pipelined decode. forward() returns once a round's tokens are back, so the backend
  // idles while the host prepares and issues the next round (validation, KV views, graph
  // update: ~0.1 ms a step at 32 streams). submit() issues a batch and returns: every
  // chunk must be greedy or sampled (only its pick comes back) and fit one round
  // (max_chunk_tokens); a `feed` chunk takes its token from its sequence's pick in the
  // previous submitted round, on the backend, so round N + 1 is issued before round N's
  // picks are back. collect() waits for the oldest submitted round and returns its picks,
  // one per chunk in batch order. At most kMaxInFlight rounds are outstanding; forward()
  // and decode_greedy() refuse to run while any is. Sequence lengths advance at submit().
  static constexpr size_t kMaxInFlight = 2;
  Status submit(std::span<const SeqChunk> batch);
  Status collect(std::vector<int32_t>& picks);
  size_t in_flight() const { return pending_.size(); }

  // Greedy decoding of one sequence: feeds `token` at the sequence's current position,
  // then each step's argmax, for n_steps steps; `out` gets the n_steps picked tokens.
  // The argmax runs on the backend and feeds the next step directly (ArgmaxArgs
  // feedback), so on a graph-capable backend each step is one graph launch and the host
  // waits only once, at the end.
  Status decode_greedy(int32_t seq_id, int32_t token, int64_t n_steps, std::vector<int32_t>& out);

  // Host wall time of forward()'s rounds, summed since the last reset (benchmarks read it
  // to split a step into host work and waiting for the device): prep = validation, KV
  // reservation, uploads and views; issue = recording / updating and launching the round;
  // wait = picking tokens, downloads and the final synchronize (mostly the device's time).
  struct RoundTimes {
    double prep_s = 0, issue_s = 0, wait_s = 0;
    int64_t rounds = 0;
  };
  const RoundTimes& round_times() const { return times_; }
  void reset_round_times() { times_ = {}; }

 private:
  struct Step {  // one sub-chunk of one round
    int32_t seq_id;
    std::span<const int32_t> tokens;
    int64_t pos0;
    int64_t out_first;   // first token index (within the sub-chunk) that needs logits; -1: none
    float* out_dst;      // where those rows go (host); null with greedy_dst
    int32_t* greedy_dst = nullptr;  // greedy chunk's last sub-chunk: the argmax of its last row goes here
    const backend::SampleParams* sample = nullptr;  // with greedy_dst: sample that row instead
  };
  Model() = default;
  // Validation shared by forward() and submit() (`what` names the caller in errors).
  Status check_batch(std::span<const SeqChunk> batch, const char* what) const;
  Status forward_round(std::span<const Step> steps);
  // A round's work up to its output rows' logits (no waiting): uploads, KV views, the
  // layers and head. Feed: token row `row` of the round takes picks_[pick] (submit()).
  struct Feed {
    int64_t row, pick;
  };
  // picked: the round's picks are in picks_ already (a batched round of greedy rows records
  // its argmax with the head); else issue_picks follows.
  Status issue_round(std::span<const Step> steps, std::span<const Feed> feeds, int64_t& n_out, bool& picked);
  // The round's picks into picks_ (argmax, or the sample op when a step samples); false
  // (nothing issued) when no step wants one.
  Result<bool> issue_picks(std::span<const Step> steps, int64_t n_out);
  Status ensure_scratch(int64_t n_tok, int64_t n_out);
  Status prepare_weights();
  // What a round's output head picks in the same recording: nothing; the greedy feedback
  // of one decoding sequence (the argmax into tok() / pos() / history_); every output row's
  // argmax into picks_.
  enum class RoundPick { none, feedback, rows };
  // Issue the ops of one round (no host sync): layers, then for n_out > 0 the output rows
  // into logits_ (gathered through out_rows_ unless `direct`) and their `pick`.
  void record_round(int64_t n_tok, int64_t n_out, const std::vector<std::vector<backend::AttnSeq>>& seqs,
                    bool direct, RoundPick pick);
  struct GraphSlot {
    std::unique_ptr<backend::Graph> graph;
    int64_t eager_runs = 0;
    uint64_t scratch_gen = 0;
    uint64_t last_use = 0;  // batch graphs: for evicting the least recently used
    bool eager_only = false;  // batch graphs: the backend could not update it; run eagerly
  };
  // Run a single-token round of `seq_id` eagerly or through its cached graph.
  Status run_decode_round(std::map<int32_t, GraphSlot>& cache, int32_t seq_id,
                          const std::vector<std::vector<backend::AttnSeq>>& seqs, bool greedy);
  // Run a round of n >= 2 sequences with one token each (batched decode) through the
  // graph recorded for n sequences (and pick_rows: with every row's argmax into picks_),
  // updated for this round's sequences (see Graph::update).
  Status run_batch_round(int64_t n, const std::vector<std::vector<backend::AttnSeq>>& seqs, bool pick_rows);
  // A slot's round: eagerly the first time (and after the scratch moved), then recorded
  // and replayed; `retarget`: each replay is first updated by re-issuing `record`;
  // decode_keys > 0: a single-token round attending that many keys (Graph::set_decode_keys).
  Status run_in_slot(GraphSlot& g, const std::function<void()>& record, bool retarget, int64_t decode_keys = 0);

  std::unique_ptr<gguf::Reader> reader_;
  GptOssConfig cfg_;
  GptOssWeights w_;
  RopeFreqs rope_;
  ModelOptions opt_;
  std::unique_ptr<backend::Backend> be_;
  KvCache kv_;

  // Scratch (backend memory), sized for the largest round so far.
  int64_t cap_tok_ = 0, cap_out_ = 0;
  std::unique_ptr<backend::Buffer> x_, xn_, q_, k_, v_, attn_, proj_, rlog_, rids_, rw_;
  // (2, cap_tok_) int32: the round's tokens, then its positions (one upload a round).
  std::unique_ptr<backend::Buffer> tokpos_;
  int32_t* tok() const { return tokpos_->as<int32_t>(); }
  int32_t* pos() const { return tokpos_->as<int32_t>() + cap_tok_; }
  std::unique_ptr<backend::Buffer> out_rows_, out_x_, logits_, inv_freq_, history_, picks_;
  std::unique_ptr<backend::Buffer> sample_params_;  // (n_out) backend::SampleParams of a sampled round
  uint64_t scratch_gen_ = 0;  // bumped whenever a scratch buffer moves (graphs then re-capture)
  std::map<int32_t, GraphSlot> fwd_graphs_, greedy_graphs_;
  std::map<int64_t, GraphSlot> batch_graphs_;  // by 2 x batch size + pick_rows
  uint64_t batch_uses_ = 0;
  RoundTimes times_;
  // Pipelined rounds (submit / collect), oldest first; their picks come back by
  // download_async into `picks`.
  struct Pending {
    std::vector<int32_t> picks;
    uint64_t ticket = 0;
  };
  std::deque<Pending> pending_;
  std::map<int32_t, int64_t> pick_rows_;  // the last submitted round: sequence -> its row of picks_
};

}  // namespace brass::model
