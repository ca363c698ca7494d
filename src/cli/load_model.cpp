// The one model-loading path of the CLI (see load_model.h).
#include "cli/load_model.h"

#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "cli/commands.h"
#include "core/log.h"
#include "core/memory.h"
#include "core/timer.h"
#include "gguf/reader.h"

#ifdef BRASS_CLI_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

namespace brass::cli {

Result<Device> parse_device(const std::string& name) {
  if (name == "auto") return Device::kAuto;
  if (name == "cpu") return Device::kCpu;
  if (name == "cuda" || name == "gpu") return Device::kCuda;
  return Status::errorf("--device: \"{}\" is not a device (expected cpu, cuda or auto)", name);
}

Result<MoeTiles> parse_moe_tiles(const std::string& name) {
  if (name == "auto") return MoeTiles::kAuto;
  if (name == "on") return MoeTiles::kOn;
  if (name == "off") return MoeTiles::kOff;
  return Status::errorf("--moe-tiles: \"{}\" is not a choice (expected auto, on or off)", name);
}

bool moe_tiles_fit(int64_t weight_bytes, int64_t tile_bytes, int64_t device_bytes) {
  return tile_bytes > 0 && device_bytes > 0 && 2 * (weight_bytes + tile_bytes) <= device_bytes;
}

const char* device_name(Device d) {
  switch (d) {
    case Device::kAuto: return "auto";
    case Device::kCpu: return "cpu";
    case Device::kCuda: return "cuda";
  }
  return "?";
}

// CPU backend: the weights are computed on straight from the mapped file. Say clearly
// when they do not fit in memory (every token would re-read the file from disk);
// otherwise read them in now, with a progress bar on a terminal, so the first tokens
// do not stall on page faults.
void prepare_host_weights(const gguf::Reader& r) {
  const size_t bytes = r.file_size() - r.data_offset();
  const std::string warning = memory_fit_warning(r.path(), static_cast<int64_t>(bytes), mem_available_bytes());
  if (!warning.empty()) {
    BRASS_LOG_WARN("{}", warning);
    return;  // populating would only evict the pages it just read
  }
  const bool show = isatty(STDERR_FILENO) && bytes > (size_t{256} << 20);
  Timer t;
  populate_read(r.base() + r.data_offset(), bytes, [&](size_t done, size_t total) {
    if (!show) return;
    std::fprintf(stderr, "\rbrass: loading weights %3d%%  %.2f / %.2f GiB  %.1f GB/s ",
                 static_cast<int>(100.0 * done / std::max<size_t>(total, 1)), done / 1073741824.0,
                 total / 1073741824.0, done / std::max(t.seconds(), 1e-9) / 1e9);
  });
  if (show) std::fprintf(stderr, "\n");
}

bool cuda_compiled() {
#ifdef BRASS_CLI_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

Result<Device> resolve_device(Device requested) {
  if (requested == Device::kCpu) return Device::kCpu;
#ifdef BRASS_CLI_HAVE_CUDA
  std::string why;
  if (backend::cuda_available(&why)) return Device::kCuda;
  if (requested == Device::kCuda) return Status::errorf("--device cuda: {}", why);
  return Device::kCpu;
#else
  if (requested == Device::kCuda) {
    return Status::error("--device cuda: this brass was built without the CUDA backend (configure with "
                         "-DBRASS_CUDA=ON on a machine with nvcc)");
  }
  return Device::kCpu;
#endif
}

Result<LoadedModel> load_model(const LoadRequest& req) {
  LoadedModel lm;
  lm.builtin = req.model.empty();
  lm.path = lm.builtin ? builtin_model_path() : req.model;
  BRASS_ASSIGN_OR_RETURN(lm.device, resolve_device(req.device));
  BRASS_ASSIGN_OR_RETURN(auto reader, gguf::Reader::open(lm.path));
  lm.synthetic = reader->find("brass.synthetic") != nullptr;
  if (req.tokenizer) {
    BRASS_ASSIGN_OR_RETURN(lm.tokenizer, tok::Tokenizer::from_gguf(*reader));
  }
  Timer t;
  BRASS_ASSIGN_OR_RETURN(lm.model, load_model_on(std::move(reader), lm.device, req.options, req.kv_type, req.moe_tiles));
  lm.load_s = t.seconds();
  backend::Backend& be = lm.model->backend();
  lm.device_desc = lm.device == Device::kCuda ? be.name() : fmt::format("{}, {} threads", be.name(), be.n_threads());
  return lm;
}

Result<std::unique_ptr<model::Model>> load_model_on(std::unique_ptr<gguf::Reader> reader, Device device,
                                                    model::ModelOptions options, std::optional<DType> kv_type,
                                                    MoeTiles moe_tiles) {
  if (device == Device::kAuto) return Status::error("load_model_on: the device must be resolved (cpu or cuda)");
  options.kv_type = kv_type ? *kv_type : device == Device::kCuda ? DType::F16 : DType::F32;
  if (device == Device::kCuda) {
#ifdef BRASS_CLI_HAVE_CUDA
    backend::CudaBackendOptions co;
    if (moe_tiles != MoeTiles::kOff) {
      int64_t weights = 0, tiles = 0;
      for (const gguf::TensorInfo& t : reader->tensors()) {
        int64_t ne[4] = {1, 1, 1, 1};
        for (size_t d = 0; d < t.ne.size() && d < 4; ++d) ne[d] = t.ne[d];
        weights += t.nbytes;
        tiles += t.name == "output.weight" ? backend::cuda_head_tile_bytes(t.type, ne)
                                            : backend::cuda_moe_tile_bytes(t.type, ne);
      }
      co.moe_tiles = moe_tiles == MoeTiles::kOn || moe_tiles_fit(weights, tiles, backend::cuda_device_memory(co.device));
    }
    BRASS_ASSIGN_OR_RETURN(auto be, backend::make_cuda_backend(co));
    return model::Model::load(std::move(reader), options, std::move(be));
#else
    (void)moe_tiles;
    return resolve_device(Device::kCuda).status();
#endif
  }
  prepare_host_weights(*reader);
  return model::Model::load(std::move(reader), options);
}

bool is_plain_greedy(const runtime::SamplerParams& p) {
  if (p.temperature > 0.0f) return false;
  const bool penalties_off = p.penalty_last_n == 0 || (p.repetition_penalty == 1.0f && p.presence_penalty == 0.0f &&
                                                       p.frequency_penalty == 0.0f);
  return penalties_off && p.n_logprobs == 0;
}

}  // namespace brass::cli
