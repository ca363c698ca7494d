// `brass serve --device`: the server loads through the CLI's shared device choice
// (load_model_on). Spawns the built binary under `timeout` (the server runs until a
// signal) and checks what it reports on stderr: the resolved device, the backend the
// model became ready on, and the errors for an unknown or unavailable device.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "cli_util.h"

#ifdef BRASS_HAVE_SERVER

namespace brass::cli_test {
namespace {

// Runs `brass ARGS` in the background for at most `seconds` (then SIGTERM), with stderr
// merged into the captured output; rc is the server's own exit status.
Proc serve_for(const std::string& args, int seconds) {
  const std::string bin = std::string(BRASS_BINARY_DIR) + "/brass";
  const std::string cmd = "{ " + bin + " " + args + " & P=$!; for i in $(seq 1 " + std::to_string(seconds * 4) +
                          "); do kill -0 $P 2>/dev/null || break; sleep 0.25; done; kill -TERM $P 2>/dev/null; "
                          "wait $P; } 2>&1";
  Proc p;
  FILE* f = popen(cmd.c_str(), "r");
  if (!f) return p;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) p.err.append(buf, n);
  const int status = pclose(f);
  p.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return p;
}

TEST(ServeDevice, CpuLoadsOnTheCpuBackend) {
  // SIGTERM after 6 s (the tiny model loads in well under a second): a clean stop, rc 0.
  const Proc q = serve_for("serve --device cpu --port 0 --parallel 2 --ctx 256", 6);
  EXPECT_EQ(q.rc, 0) << q.err;
  EXPECT_NE(q.err.find("brass: serve: device cpu"), std::string::npos) << q.err;
  EXPECT_NE(q.err.find("ready on cpu"), std::string::npos) << q.err;
  EXPECT_NE(q.err.find("SIGTERM, stopping"), std::string::npos) << q.err;
}

TEST(ServeDevice, UnknownDeviceFailsBeforeListening) {
  const Proc p = run("serve --device tpu --port 0");
  EXPECT_NE(p.rc, 0);
  EXPECT_NE(p.err.find("--device: \"tpu\" is not a device"), std::string::npos) << p.err;
  EXPECT_EQ(p.err.find("listening"), std::string::npos) << p.err;
}

TEST(ServeDevice, CudaFailsFastWhereUnavailableElseServesOnCuda) {
  const Proc p = serve_for("serve --device cuda --port 0 --parallel 2 --ctx 256", 10);
  if (p.err.find("brass: serve: device cuda") != std::string::npos) {
    // A GPU is present: the model must have become ready on the CUDA backend.
    EXPECT_NE(p.err.find("ready on cuda"), std::string::npos) << p.err;
  } else {
    EXPECT_NE(p.rc, 0);
    EXPECT_NE(p.err.find("--device cuda: "), std::string::npos) << p.err;
    EXPECT_EQ(p.err.find("listening"), std::string::npos) << p.err;
  }
}

}  // namespace
}  // namespace brass::cli_test

#endif  // BRASS_HAVE_SERVER
