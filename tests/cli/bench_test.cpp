// `brass bench` and `--device` end to end: spawns the built binary on the built-in tiny
// model. The JSON rows are checked for shape and internal consistency (tok/s and ms/tok
// recomputed from the raw per-repetition seconds), the bytes-per-token of the decode rows
// against an independent count from `brass inspect`'s tensor table (every tensor, experts
// scaled by n_expert_used / n_expert, one token-embedding row) plus a hand-computed KV
// term, and bad arguments must give "brass: error: ..." with exit code 1.
#include <gtest/gtest.h>

#include "cli_util.h"
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

namespace {

using namespace brass::cli_test;

namespace fs = std::filesystem;



// Bytes one decode step reads from the weights, from `brass inspect FILE`'s tensor lines
// ("  name type [shape] bytes offset"): expert tensors (ffn_*_exps) count
// n_expert_used / n_expert of their bytes, token_embd one row (bytes / n_vocab), every
// other tensor all of its bytes.
// A batched step of S tokens: `experts` touched experts per layer, S token_embd rows.
double weight_bytes_from_inspect(const std::string& path, double n_expert_used, int n_expert, int n_vocab,
                                 int embd_rows = 1) {
  const Proc p = run("inspect " + path);
  EXPECT_EQ(p.rc, 0) << p.err;
  std::istringstream in(p.out);
  std::string line;
  bool in_tensors = false;
  double total = 0;
  int n_tensors = 0;
  while (std::getline(in, line)) {
    if (line == "tensors:") {
      in_tensors = true;
      std::getline(in, line);  // header
      continue;
    }
    if (!in_tensors) continue;
    if (line.rfind("  total", 0) == 0 || line.empty()) break;
    std::istringstream ls(line);
    std::vector<std::string> w;
    std::string x;
    while (ls >> x) w.push_back(x);
    if (w.size() < 4) continue;
    const std::string& name = w[0];
    const double bytes = std::stod(w[w.size() - 2]);
    ++n_tensors;
    if (name.find("_exps.") != std::string::npos) {
      total += bytes * n_expert_used / n_expert;
    } else if (name == "token_embd.weight") {
      total += bytes / n_vocab * embd_rows;
    } else {
      total += bytes;
    }
  }
  EXPECT_GT(n_tensors, 10) << p.out;
  return total;
}

TEST(Bench, JsonRowsOnTheBuiltinModel) {
  const Proc p = run("bench --json -p 16 -n 4 --depth 0,8 --reps 2");
  ASSERT_EQ(p.rc, 0) << p.err;
  const auto j = nlohmann::json::parse(p.out);
  EXPECT_TRUE(j["random_weights"].get<bool>());
  const std::string device = j["device"].get<std::string>();
  EXPECT_TRUE(device == "cpu" || device == "cuda") << device;
  const double floor = j["floor_gb_s"].get<double>();
  EXPECT_GT(floor, 0.1);  // any machine reads memory faster than 100 MB/s
  ASSERT_EQ(j["rows"].size(), 3u) << j.dump(1);

  std::map<std::string, nlohmann::json> rows;
  for (const auto& r : j["rows"]) rows[r["test"].get<std::string>()] = r;
  ASSERT_TRUE(rows.count("pp16")) << j.dump(1);
  ASSERT_TRUE(rows.count("tg4")) << j.dump(1);
  ASSERT_TRUE(rows.count("tg4 @ d8")) << j.dump(1);
  for (const auto& [name, r] : rows) {
    SCOPED_TRACE(name);
    const int n = r["n_gen"].get<int>() > 0 ? r["n_gen"].get<int>() : r["n_prompt"].get<int>();
    ASSERT_EQ(r["samples_s"].size(), 2u);
    double mean_tps = 0, mean_s = 0;
    for (const auto& s : r["samples_s"]) {
      EXPECT_GT(s.get<double>(), 0.0);
      mean_tps += n / s.get<double>() / 2;
      mean_s += s.get<double>() / 2;
    }
    EXPECT_GT(r["tok_s"].get<double>(), 0.0);
    EXPECT_NEAR(r["tok_s"].get<double>(), mean_tps, 1e-6 * mean_tps);
    EXPECT_NEAR(r["ms_per_tok"].get<double>(), 1e3 * mean_s / n, 1e-6 * 1e3 * mean_s / n);
    EXPECT_GE(r["tok_s_stdev"].get<double>(), 0.0);
  }
  EXPECT_EQ(rows["pp16"]["n_prompt"].get<int>(), 16);
  EXPECT_TRUE(rows["pp16"]["gb_s"].is_null());
  EXPECT_EQ(rows["tg4"]["depth"].get<int>(), 0);
  EXPECT_EQ(rows["tg4 @ d8"]["depth"].get<int>(), 8);

  // Bytes per decoded token: weights (counted from the file's tensor table) + KV. The
  // built-in tiny model: 4 layers (2 full, 2 sliding with n_swa 8), kv_dim 2 x 32 = 64,
  // 8 experts, 4 used, o200k vocabulary (201088).
  const double w = weight_bytes_from_inspect(j["model"].get<std::string>(), 4, 8, 201088);
  const std::string kv_type = j["kv_type"].get<std::string>();
  const double elt = kv_type == "f16" ? 2.0 : 4.0;
  const double row_pair = 2.0 * 64 * elt;  // one K row + one V row
  // d0, steps at positions 0..3: full layers read 1+2+3+4 rows each, sliding ones the same
  // (all < 8): 4 layers x 10 = 40 row pairs over 4 steps.
  // d8, positions 8..11: full layers 9+10+11+12 = 42 each, sliding layers 8 x 4 = 32 each:
  // 2 x 42 + 2 x 32 = 148 row pairs over 4 steps.
  const double b0 = w + 40.0 / 4 * row_pair, b8 = w + 148.0 / 4 * row_pair;
  EXPECT_NEAR(rows["tg4"]["bytes_per_tok"].get<double>(), b0, 1e-9 * b0);
  EXPECT_NEAR(rows["tg4 @ d8"]["bytes_per_tok"].get<double>(), b8, 1e-9 * b8);
  for (const char* t : {"tg4", "tg4 @ d8"}) {
    const auto& r = rows[t];
    const double gbs = r["bytes_per_tok"].get<double>() * r["tok_s"].get<double>() / 1e9;
    EXPECT_NEAR(r["gb_s"].get<double>(), gbs, 1e-6 * gbs) << t;
    EXPECT_NEAR(r["pct_floor"].get<double>(), 100.0 * gbs / floor, 1e-6 * 100.0 * gbs / floor) << t;
  }
}

// Batched decode rows: S sequences of a P-token prompt, G steps of one call. Aggregate
// tok/s = S * G / seconds; ms_per_step = seconds / G; bytes per step = weights with the
// experts any of S tokens touches under uniform routing (8 experts, 4 per token: 8 * (1 -
// 0.5^S)) and S embedding rows, plus S sequences' KV reads at positions P .. P + G - 1.
TEST(Bench, BatchedDecodeRows) {
  const Proc p = run("bench --json -p 0 -n 0 -s 1,3 --stream-prompt 5 --stream-gen 4 --reps 2 --floor 10");
  ASSERT_EQ(p.rc, 0) << p.err;
  const auto j = nlohmann::json::parse(p.out);
  ASSERT_EQ(j["rows"].size(), 2u) << j.dump(1);
  const std::string kv_type = j["kv_type"].get<std::string>();
  const double row_pair = 2.0 * 64 * (kv_type == "f16" ? 2.0 : 4.0);
  // positions 5..8: full layers 6+7+8+9 = 30 rows each, sliding (n_swa 8) 6+7+8+8 = 29:
  // 2 x 30 + 2 x 29 = 118 row pairs over 4 steps, per sequence.
  const double kv_per_seq = 118.0 / 4 * row_pair;
  for (int S : {1, 3}) {
    const auto& r = j["rows"][S == 1 ? 0 : 1];
    SCOPED_TRACE(S);
    EXPECT_EQ(r["test"].get<std::string>(), "x" + std::to_string(S) + " tg4");
    EXPECT_EQ(r["streams"].get<int>(), S);
    ASSERT_EQ(r["samples_s"].size(), 2u);
    double mean_tps = 0, mean_s = 0;
    for (const auto& x : r["samples_s"]) {
      mean_tps += S * 4 / x.get<double>() / 2;
      mean_s += x.get<double>() / 2;
    }
    EXPECT_NEAR(r["tok_s"].get<double>(), mean_tps, 1e-6 * mean_tps);
    EXPECT_NEAR(r["ms_per_step"].get<double>(), 1e3 * mean_s / 4, 1e-6 * 1e3 * mean_s / 4);
    EXPECT_GT(r["prefill_tok_s"].get<double>(), 0.0);
    const double experts = 8.0 * (1.0 - std::pow(0.5, S));
    const double want = weight_bytes_from_inspect(j["model"].get<std::string>(), experts, 8, 201088, S) + S * kv_per_seq;
    EXPECT_NEAR(r["bytes_per_step"].get<double>(), want, 1e-9 * want);
    const double gbs = want * mean_tps / S / 1e9;  // bytes per step x steps per second
    EXPECT_NEAR(r["gb_s"].get<double>(), gbs, 1e-6 * gbs);
    EXPECT_NEAR(r["pct_floor"].get<double>(), 100.0 * gbs / 10.0, 1e-6 * 10.0 * gbs);
  }
}

TEST(Bench, TableHasOneLinePerRow) {
  const Proc p = run("bench -p 8,12 -n 3 --reps 1 --floor 10");
  ASSERT_EQ(p.rc, 0) << p.err;
  int lines = 0;
  for (const char* t : {" pp8 |", " pp12 |", " tg3 |"}) {
    EXPECT_NE(p.out.find(t), std::string::npos) << t << "\n" << p.out;
  }
  std::istringstream in(p.out);
  std::string line;
  while (std::getline(in, line)) lines += line.rfind("| builtin-tiny.gguf", 0) == 0;
  EXPECT_EQ(lines, 3) << p.out;
  EXPECT_NE(p.out.find("floor 10.0 GB/s"), std::string::npos) << p.out;
}

TEST(Bench, BadArgumentsErrorCleanly) {
  for (const char* args : {"bench -p abc", "bench -p 16,-3", "bench -n 4x", "bench --depth ,", "bench --reps 0",
                           "bench --device tpu", "bench -p 0 -n 0", "bench --floor -1",
                           "bench -m /nonexistent/model.gguf --floor 1", "bench --depth 100000 -n 4 --floor 1",
                           "bench -s 2,x", "bench -s 2 --stream-prompt 0", "bench -s 2 --stream-gen -4"}) {
    SCOPED_TRACE(args);
    const Proc p = run(args);
    EXPECT_EQ(p.rc, 1);
    EXPECT_NE(p.err.find("brass: error: "), std::string::npos) << p.err;
    EXPECT_TRUE(p.out.empty()) << p.out;
  }
}

TEST(Device, RunOnCpuAndBadDevice) {
  const Proc p = run("run --json --device cpu -n 3 --temp 0 -p 'Hello'");
  ASSERT_EQ(p.rc, 0) << p.err;
  const auto j = nlohmann::json::parse(p.out);
  EXPECT_EQ(j["device"].get<std::string>(), "cpu");
  EXPECT_FALSE(j["device_greedy"].get<bool>());
  EXPECT_EQ(j["tokens"].size(), 3u);

  const Proc bad = run("run --device tpu -p 'Hello'");
  EXPECT_EQ(bad.rc, 1);
  EXPECT_NE(bad.err.find("brass: error: --device: \"tpu\""), std::string::npos) << bad.err;
}

// Greedy decoding must give the same tokens whichever device `auto` picks as on the CPU
// (on a machine without CUDA both are the CPU; with a GPU this compares the device's
// decode_greedy path against the host sampler).
TEST(Device, AutoGreedyMatchesCpu) {
  const Proc cpu = run("run --json --device cpu -n 6 --temp 0 -p 'The quick brown fox'");
  const Proc aut = run("run --json --device auto -n 6 --temp 0 -p 'The quick brown fox'");
  ASSERT_EQ(cpu.rc, 0) << cpu.err;
  ASSERT_EQ(aut.rc, 0) << aut.err;
  const auto jc = nlohmann::json::parse(cpu.out), ja = nlohmann::json::parse(aut.out);
  if (ja["device"] == "cpu") EXPECT_EQ(jc["tokens"], ja["tokens"]);
  else EXPECT_GE(ja["tokens"].size(), 1u);  // quantized device kernels may legitimately diverge
}

// --moe-tiles auto|on|off (cuda: the experts' MMA tile copy, bit-identical results; the
// CPU ignores it) is accepted by run and bench and changes no token; anything else is an
// error that names the option.
TEST(Device, MoeTilesOptionKeepsTokens) {
  const Proc off = run("run --json --device auto --moe-tiles off -n 6 --temp 0 -p 'The quick brown fox'");
  const Proc on = run("run --json --device auto --moe-tiles on -n 6 --temp 0 -p 'The quick brown fox'");
  ASSERT_EQ(off.rc, 0) << off.err;
  ASSERT_EQ(on.rc, 0) << on.err;
  EXPECT_EQ(nlohmann::json::parse(off.out)["tokens"], nlohmann::json::parse(on.out)["tokens"]);
  const Proc b = run("bench --json --moe-tiles on -p 8 -n 2 -r 1");
  ASSERT_EQ(b.rc, 0) << b.err;
  EXPECT_FALSE(nlohmann::json::parse(b.out).empty());
  const Proc bad = run("run --moe-tiles maybe -p 'Hello'");
  EXPECT_NE(bad.rc, 0);
  EXPECT_NE(bad.err.find("--moe-tiles"), std::string::npos) << bad.err;
}

}  // namespace
