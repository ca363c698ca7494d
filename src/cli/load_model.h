// Model loading shared by every `brass` command that runs a model (run, chat, bench):
// the GGUF path (or the built-in model), the tokenizer from the same file, the model
// options, and the device: `--device cpu|cuda|auto`. auto picks CUDA when the binary was
// built with the CUDA backend (BRASS_CLI_HAVE_CUDA) and a GPU is present, else the CPU;
// asking for cuda where it is unavailable is an error that says why.
//
// Per device defaults: the CPU keeps the f32 KV cache (the reference); CUDA stores the
// KV cache in f16 (half the bytes attention reads per decoded token), unless the caller
// sets kv_type explicitly.
//
// Also here: whether a sampler configuration is plain greedy decoding, in which case the
// commands let the backend pick the tokens (Model::decode_greedy: on CUDA the argmax runs
// on the GPU and feeds the next captured step; no logits are copied to the host).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "core/dtype.h"
#include "core/status.h"
#include "model/model.h"
#include "runtime/sampler.h"
#include "tokenizer/tokenizer.h"

namespace brass::cli {

enum class Device { kAuto, kCpu, kCuda };

// "cpu" | "cuda" | "auto" (also "gpu" for cuda).
Result<Device> parse_device(const std::string& name);
const char* device_name(Device d);

// Whether this binary has the CUDA backend compiled in.
bool cuda_compiled();
// auto -> cpu or cuda; cuda -> cuda when usable, else an error with the reason
// ("built without CUDA", "no CUDA device: ...").
Result<Device> resolve_device(Device requested);

// --moe-tiles auto|on|off: the CUDA backend's MMA tile copy of gpt-oss's MXFP4 experts
// (backend::CudaBackendOptions::moe_tiles: batched decode ~10% faster, the experts' bytes
// twice). auto: on where the weights and the copy take at most half the device's memory
// (gpt-oss-20b on an 80 GB card: ~23 of 80 GB; not gpt-oss-120b), and only with a model
// that has such experts.
enum class MoeTiles { kAuto, kOn, kOff };
Result<MoeTiles> parse_moe_tiles(const std::string& name);
inline constexpr const char* kMoeTilesHelp =
    "cuda: a second copy of the MXFP4 experts laid out as MMA tiles, batched decode ~10% faster (auto: when the "
    "weights and the copy take at most half the GPU's memory)";
bool moe_tiles_fit(int64_t weight_bytes, int64_t tile_bytes, int64_t device_bytes);

struct LoadRequest {
  std::string model;              // empty: the built-in model
  Device device = Device::kAuto;
  model::ModelOptions options;    // n_threads, n_ctx, yarn_rounded, max_chunk_tokens, ...
  std::optional<DType> kv_type;   // nullopt: per-device default (see above)
  bool tokenizer = true;          // also build the tokenizer from the GGUF metadata
  MoeTiles moe_tiles = MoeTiles::kAuto;  // cuda: the experts' MMA tile copy (--moe-tiles)
};

struct LoadedModel {
  std::string path;               // the file actually loaded
  bool builtin = false;           // the built-in tiny model (no -m)
  bool synthetic = false;         // written by `brass synth` (random weights)
  Device device = Device::kCpu;   // resolved
  std::string device_desc;        // e.g. "cpu (avx512, 16 threads)", "cuda:0 NVIDIA H200"
  double load_s = 0.0;            // Model::load wall time (incl. the upload to the device)
  std::unique_ptr<tok::Tokenizer> tokenizer;  // null when not requested
  std::unique_ptr<model::Model> model;
};

Result<LoadedModel> load_model(const LoadRequest& req);

// The backend half of load_model, for callers that open the GGUF themselves (`brass
// serve` loads in the background, after its own tokenizer step): builds the Model from
// `reader` on `device` (already resolved: kCpu or kCuda), with the per-device KV type
// default unless `kv_type` is set.
Result<std::unique_ptr<model::Model>> load_model_on(std::unique_ptr<gguf::Reader> reader, Device device,
                                                    model::ModelOptions options,
                                                    std::optional<DType> kv_type = std::nullopt,
                                                    MoeTiles moe_tiles = MoeTiles::kAuto);

// True when `p` picks the argmax of the raw logits (temperature <= 0 and no penalty that
// could change the argmax), so the backend's greedy decode gives the same tokens.
bool is_plain_greedy(const runtime::SamplerParams& p);

}  // namespace brass::cli
