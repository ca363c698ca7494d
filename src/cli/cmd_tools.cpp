// `brass synth`, `brass convert`, `brass inspect`.
#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "core/dtype.h"
#include "gguf/reader.h"
#include "model/config.h"
#include "tools/convert.h"
#include "tools/synth.h"

namespace brass::cli {

namespace {

Result<DType> parse_type(const std::string& s, const char* what) {
  auto t = dtype_from_name(s);
  if (!t) return Status::errorf("{}: unknown type \"{}\"", what, s);
  return *t;
}

}  // namespace

Runner add_synth(CLI::App& app) {
  struct Opts {
    std::string preset = "tiny", out, vocab, dense = "q8_0", experts = "mxfp4";
    uint64_t seed = 0;
    int threads = 2;
  };
  auto o = std::make_shared<Opts>();
  app.add_option("--preset", o->preset, "20b | 120b | tiny")->capture_default_str();
  app.add_option("OUT", o->out, "output .gguf")->required();
  app.add_option("--seed", o->seed, "random seed")->capture_default_str();
  app.add_option("--vocab", o->vocab, "o200k_base.tiktoken (default: node_modules copy or $BRASS_VOCAB)");
  app.add_option("--dense-type", o->dense, "attention/embedding/output type: q8_0 | f32 | f16 | bf16")
      ->capture_default_str();
  app.add_option("--expert-type", o->experts, "expert weight type: mxfp4 | f32 | f16 | bf16 | q8_0")
      ->capture_default_str();
  app.add_option("--threads", o->threads, "fill threads")->capture_default_str();
  app.footer("The weights are random: for benchmarks and tests, not for text.");
  return [o]() -> int {
    tools::SynthOptions so;
    so.preset = o->preset;
    so.out_path = o->out;
    so.seed = o->seed;
    so.vocab_file = o->vocab.empty() ? default_vocab_path() : o->vocab;
    so.threads = o->threads;
    auto d = parse_type(o->dense, "--dense-type");
    if (!d) return fail(d.status().message());
    auto e = parse_type(o->experts, "--expert-type");
    if (!e) return fail(e.status().message());
    so.types.dense = *d;
    so.types.experts = *e;
    auto st = tools::synth(so);
    if (!st) return fail(st.status().message());
    std::fprintf(stderr, "synth: wrote %s: %d tensors, %.3f GiB in %.1f s (%.2f GB/s)\n", o->out.c_str(),
                 st->n_tensors, st->bytes / 1073741824.0, st->seconds,
                 st->seconds > 0 ? st->bytes / st->seconds / 1e9 : 0.0);
    return 0;
  };
}

Runner add_convert(CLI::App& app) {
  struct Opts {
    std::string dir, out, type = "bf16", experts = "mxfp4", vocab;
    int threads = 2;
  };
  auto o = std::make_shared<Opts>();
  app.add_option("DIR", o->dir, "Hugging Face checkpoint directory (config.json, *.safetensors)")->required();
  app.add_option("OUT", o->out, "output .gguf")->required();
  app.add_option("--type", o->type, "attention/embedding/output type: f32 | f16 | bf16 | q8_0")->capture_default_str();
  app.add_option("--experts", o->experts, "mxfp4: quantize bf16 experts to MXFP4; keep: write them in --type "
                                          "(MXFP4 checkpoints are always repacked exactly)")
      ->capture_default_str();
  app.add_option("--vocab", o->vocab, "o200k_base.tiktoken when the checkpoint has no tokenizer.json");
  app.add_option("--threads", o->threads, "threads")->capture_default_str();
  return [o]() -> int {
    tools::ConvertOptions co;
    co.dir = o->dir;
    co.out_path = o->out;
    co.vocab_file = o->vocab.empty() ? default_vocab_path() : o->vocab;
    co.threads = o->threads;
    auto t = parse_type(o->type, "--type");
    if (!t) return fail(t.status().message());
    co.dense = *t;
    if (o->experts != "mxfp4" && o->experts != "keep") return fail("--experts must be mxfp4 or keep");
    co.experts_mxfp4 = o->experts == "mxfp4";
    auto st = tools::convert(co);
    if (!st) return fail(st.status().message());
    std::fprintf(stderr, "convert: wrote %s: %d tensors, %.3f GiB in %.1f s; experts %s; tokenizer from %s\n",
                 o->out.c_str(), st->n_tensors, st->bytes / 1073741824.0, st->seconds,
                 st->source_mxfp4 ? "MXFP4 (repacked)" : (co.experts_mxfp4 ? "bf16 -> MXFP4" : "kept"),
                 st->tokenizer_source.c_str());
    return 0;
  };
}

namespace {

std::string value_str(const gguf::Value& v, bool summarize) {
  using gguf::ValueType;
  switch (v.type) {
    case ValueType::STRING: {
      std::string s = std::get<std::string>(v.v);
      if (summarize && s.size() > 120) s = s.substr(0, 117) + "...";
      std::string out = "\"";
      for (char c : s) out += c == '\n' ? std::string("\\n") : std::string(1, c);
      return out + "\"";
    }
    case ValueType::BOOL: return std::get<bool>(v.v) ? "true" : "false";
    case ValueType::FLOAT32:
    case ValueType::FLOAT64: return fmt::format("{}", std::get<double>(v.v));
    case ValueType::INT8:
    case ValueType::INT16:
    case ValueType::INT32:
    case ValueType::INT64: return fmt::format("{}", std::get<int64_t>(v.v));
    case ValueType::ARRAY: {
      const auto& a = std::get<gguf::Array>(v.v);
      std::string out = fmt::format("[{} x {}", a.items.size(), gguf::value_type_name(a.elem_type));
      const size_t show = std::min<size_t>(a.items.size(), 5);
      for (size_t i = 0; i < show; ++i) out += (i ? ", " : ": ") + value_str(a.items[i], true);
      if (a.items.size() > show) out += ", ...";
      return out + "]";
    }
    default: return fmt::format("{}", std::get<uint64_t>(v.v));
  }
}

}  // namespace

Runner add_inspect(CLI::App& app) {
  auto path = std::make_shared<std::string>();
  app.add_option("FILE", *path, "GGUF file")->required();
  return [path]() -> int {
    auto r = gguf::Reader::open(*path);
    if (!r) return fail(r.status().message());
    const auto& rd = **r;
    std::printf("%s: GGUF v%u, %zu metadata keys, %zu tensors, alignment %llu, data at %llu\n", path->c_str(),
                rd.version(), rd.metadata().size(), rd.tensors().size(),
                static_cast<unsigned long long>(rd.alignment()), static_cast<unsigned long long>(rd.data_offset()));
    std::printf("\nmetadata:\n");
    for (const auto& kv : rd.metadata()) {
      std::printf("  %-48s %-8s %s\n", kv.key.c_str(), gguf::value_type_name(kv.value.type),
                  value_str(kv.value, true).c_str());
    }
    std::printf("\ntensors:\n  %-36s %-6s %-22s %14s %14s\n", "name", "type", "shape", "bytes", "offset");
    int64_t total = 0;
    for (const auto& t : rd.tensors()) {
      std::printf("  %-36s %-6s %-22s %14lld %14llu\n", t.name.c_str(), std::string(dtype_name(t.type)).c_str(),
                  t.shape_str().c_str(), static_cast<long long>(t.nbytes),
                  static_cast<unsigned long long>(t.offset));
      total += t.nbytes;
    }
    std::printf("  total %.3f GiB in %zu tensors\n\n", total / 1073741824.0, rd.tensors().size());
    auto cfg = model::load_config(rd);
    if (!cfg) return fail(cfg.status().message());
    std::printf("%s\n", model::config_summary(*cfg, rd, 2).c_str());
    return 0;
  };
}

}  // namespace brass::cli
