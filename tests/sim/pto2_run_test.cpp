// pto2-run as a user runs it: a real process on the vector example's
// libraries, with configs broken in each way the loader must explain.
#include <catch2/catch.hpp>

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

namespace fs = std::filesystem;

namespace {

struct Result {
  int exit_code;
  std::string output;  // stdout + stderr
};

Result run_env(const std::string& env, const std::string& args) {
  const std::string cmd = env + " " + PTO2_RUN_PATH + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  const int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}
Result run(const std::string& args) { return run_env("", args); }

struct TempDir {
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "pto2-run-test-XXXXXX").string();
    REQUIRE(mkdtemp(tmpl.data()) != nullptr);
    path = tmpl;
  }
  ~TempDir() { fs::remove_all(path); }
  fs::path path;
};

// The vector example's config with `from` replaced by `to`, written in dir
// with absolute library paths.
std::string variant(const TempDir& dir, const std::string& from, const std::string& to) {
  std::ifstream in(std::string(VECTOR_EXAMPLE_DIR) + "/kernels.toml");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  text = std::regex_replace(text, std::regex("library = \"lib"),
                            std::string("library = \"") + VECTOR_EXAMPLE_DIR + "/lib");
  if (!from.empty()) {
    const size_t at = text.find(from);
    REQUIRE(at != std::string::npos);
    text.replace(at, from.size(), to);
  }
  const fs::path file = dir.path / "kernels.toml";
  std::ofstream(file) << text;
  return file.string();
}

}  // namespace

TEST_CASE("pto2-run runs the vector example, writes .npy outputs and reads .npy inputs", "[pto2-run]") {
  TempDir dir;
  const std::string cfg = std::string(VECTOR_EXAMPLE_DIR) + "/kernels.toml";
  Result r = run(cfg + " -o " + (dir.path / "out").string());
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("f: PASS (16384/16384 elements matched)"));
  REQUIRE(fs::exists(dir.path / "out" / "f.npy"));
  CHECK(fs::file_size(dir.path / "out" / "f.npy") == 128 + 16384 * 4);

  // The output as input a and b: the reference sees the same inputs, so it still passes.
  const std::string f = (dir.path / "out" / "f.npy").string();
  r = run(cfg + " -o " + (dir.path / "out2").string() + " --input a=" + f + " --input b=" + f);
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("f: PASS"));

  // A golden file that does not match: FAIL, exit 1, the first mismatch shown.
  r = run(cfg + " -o " + (dir.path / "out3").string() + " --seed 99 --golden f=" + f);
  INFO(r.output);
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.output, Catch::Contains("f: FAIL") && Catch::Contains("first mismatch"));
}

TEST_CASE("pto2-run explains each way user code fails to load or run, naming the file", "[pto2-run]") {
  TempDir dir;
  SECTION("orchestration library that does not exist") {
    const std::string cfg = variant(dir, "liborch_vector.so", "liborch_missing.so");
    Result r = run(cfg);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Catch::Contains("cannot load") && Catch::Contains("liborch_missing.so"));
  }
  SECTION("kernel library without kernel_entry") {
    const std::string cfg = variant(dir, "libkernel_vector_mul.so", "libgolden_vector.so");
    Result r = run(cfg);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Catch::Contains("libgolden_vector.so' does not export 'kernel_entry'"));
  }
  SECTION("orchestration library without the orchestration symbols") {
    const std::string cfg = variant(dir, "liborch_vector.so", "libkernel_vector_add.so");
    Result r = run(cfg);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Catch::Contains("does not export 'aicpu_orchestration_config'"));
  }
  SECTION("wrong argument count") {
    const std::string cfg = variant(dir, "[[args]]\nname = \"n\"",
                                    "[[args]]\nname = \"n2\"\nrole = \"scalar\"\nvalue = 1\n\n[[args]]\nname = \"n\"");
    Result r = run(cfg);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Catch::Contains("liborch_vector.so") && Catch::Contains("expects 4 arguments, got 5"));
  }
  SECTION("a func_id the orchestration uses but the config does not define") {
    const std::string cfg = variant(dir, "func_id = 1", "func_id = 7");
    Result r = run(cfg);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Catch::Contains("liborch_vector.so") && Catch::Contains("kernel id 1 is not registered"));
  }
  SECTION("an unknown key in the config") {
    const std::string cfg = variant(dir, "core_type = \"aiv\"", "core_type = \"aiv\"\ncore_typ = \"aic\"");
    Result r = run(cfg);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Catch::Contains("unknown key 'core_typ'"));
  }
  SECTION("a tensor dtype pto2-run cannot compare") {
    const std::string cfg = variant(dir, "name = \"f\"\nrole = \"output\"\ndtype = \"float32\"",
                                    "name = \"f\"\nrole = \"output\"\ndtype = \"float16\"");
    Result r = run(cfg);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Catch::Contains("dtype 'float16' is not supported by pto2-run"));
  }
  SECTION("an input file of the wrong shape") {
    const std::string npy = (dir.path / "small.npy").string();
    {
      // 4 fp32 zeros as a .npy, written by hand.
      std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }";
      header.append((64 - (10 + header.size() + 1) % 64) % 64, ' ');
      header.push_back('\n');
      std::ofstream out(npy, std::ios::binary);
      out.write("\x93NUMPY\x01\x00", 8);
      const char len[2] = {char(header.size()), 0};
      out.write(len, 2);
      out << header;
      out.write(std::string(16, '\0').data(), 16);
    }
    Result r =
        run(std::string(VECTOR_EXAMPLE_DIR) + "/kernels.toml -o " + (dir.path / "o").string() + " --input a=" + npy);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Catch::Contains("input a") && Catch::Contains("16384"));
  }
  SECTION("--help is there for a newcomer") {
    Result r = run("--help");
    CHECK(r.exit_code == 0);
    CHECK_THAT(r.output, Catch::Contains("--block-dim") && Catch::Contains("--input") && Catch::Contains("Example"));
  }
}

TEST_CASE("pto2-run --trace writes a swimlane trace with a slice per task and prints a summary", "[pto2-run][trace]") {
  TempDir dir;
  const std::string trace = (dir.path / "trace.json").string();
  Result r =
      run(std::string(VECTOR_EXAMPLE_DIR) + "/kernels.toml -o " + (dir.path / "o").string() + " --trace " + trace);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("summary: 4 tasks") && Catch::Contains("AIV cores") &&
                           Catch::Contains("scheduler overhead per task"));
  std::ifstream in(trace);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(text.rfind("{\n  \"displayTimeUnit\"", 0) == 0);
  CHECK(text.size() > 6);
  CHECK(text.substr(text.size() - 6) == "  ]\n}\n");
  auto count = [&](const std::string& needle) {
    size_t n = 0;
    for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
    return n;
  };
  CHECK(count("\"cat\": \"kernel\"") == 4);  // one slice per task, on its core's lane
  CHECK(count("\"name\": \"add_scalar\"") == 2);
  CHECK(count("orchestrator (AICPU)") == 1);
  CHECK(count("scheduler 0 (AICPU)") == 1);
  CHECK(count("AIV ") >= 1);

  // --summary alone: the same summary, no trace file.
  r = run(std::string(VECTOR_EXAMPLE_DIR) + "/kernels.toml -o " + (dir.path / "o2").string() + " --summary");
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("summary: 4 tasks") && Catch::Contains("per core"));
  CHECK_FALSE(Catch::Contains("trace:").match(r.output));
}

TEST_CASE("pto2-run: an output element no task wrote fails, whatever the golden", "[pto2-run]") {
  TempDir dir;
  // f has one element more than the n = 16384 the orchestration computes.
  const std::string cfg = variant(dir, "shape = [16384]\nrtol", "shape = [16385]\nrtol");
  Result r = run(cfg);
  INFO(r.output);
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.output, Catch::Contains("f: FAIL (16384/16385 elements matched)"));
}

TEST_CASE("pto2-run: an argument larger than the simulated device is refused by name", "[pto2-run]") {
  TempDir dir;
  // 2^34 float32: 64 GiB, past the 4 GiB device (and this host). Before: its host copy came first -
  // "internal error: std::bad_alloc", or the OOM killer.
  const std::string cfg = variant(dir, "shape = [16384]\nrtol", "shape = [131072, 131072]\nrtol");
  Result r = run(cfg);
  INFO(r.output);
  CHECK(r.exit_code != 0);
  CHECK_THAT(r.output, Catch::Contains("argument f: device out of memory"));
  CHECK_THAT(r.output, !Catch::Contains("internal error"));
}

TEST_CASE("pto2-run: data settings on an output are refused - an accumulator is an inout", "[pto2-run]") {
  TempDir dir;
  const std::string cfg =
      variant(dir, "name = \"f\"\nrole = \"output\"", "name = \"f\"\nrole = \"output\"\ngenerate = \"zeros\"");
  Result r = run(cfg);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Contains("'generate' does not apply to an output") && Catch::Contains("inout"));
  // The bgemm example accumulates into C, declared inout with zeros.
  r = run(std::string(BGEMM_EXAMPLE_DIR) + "/kernels.toml");
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("C: PASS"));
}

TEST_CASE("pto2-run: command-line errors exit 2, --version, a missing config, no files unless asked", "[pto2-run]") {
  TempDir dir;
  Result r = run("--no-such-flag " + std::string(VECTOR_EXAMPLE_DIR) + "/kernels.toml");
  CHECK(r.exit_code == 2);
  r = run("");
  CHECK(r.exit_code == 2);
  r = run("--version");
  CHECK(r.exit_code == 0);
  CHECK(std::regex_search(r.output, std::regex("^pto2-run [0-9]+\\.[0-9]+\\.[0-9]+ \\(")));
  r = run((dir.path / "missing.toml").string());
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Contains("cannot open " + (dir.path / "missing.toml").string()));
  // Run from an empty directory: nothing is created there without --output-dir.
  const std::string cmd = "cd " + dir.path.string() + " && " + std::string(PTO2_RUN_PATH) + " " + VECTOR_EXAMPLE_DIR +
                          "/kernels.toml >/dev/null 2>&1";
  CHECK(std::system(cmd.c_str()) == 0);
  CHECK(fs::is_empty(dir.path));
}

TEST_CASE("pto2-run: a run's error is printed once, with its advice", "[pto2-run]") {
  Result r = run(std::string(VECTOR_EXAMPLE_DIR) + "/kernels.toml --task-window 4");
  INFO(r.output);
  CHECK(r.exit_code == 2);
  size_t n = 0;
  for (size_t at = r.output.find("Flow Control Deadlock"); at != std::string::npos;
       at = r.output.find("Flow Control Deadlock", at + 1))
    ++n;
  CHECK(n == 1);
  CHECK_THAT(r.output,
             Catch::Contains("PTO2_RING_TASK_WINDOW >= 8") && Catch::Contains("failed: SCOPE_EXCEEDS_WINDOW (10)"));
}

TEST_CASE("pto2-run: the summary counts tasks per kernel - --dump-tensors writes each task's tensors", "[pto2-run]") {
  TempDir dir;
  const fs::path dump = dir.path / "dump";
  Result r = run(std::string(VECTOR_EXAMPLE_DIR) + "/kernels.toml --summary -o " + (dir.path / "o").string() +
                 " --dump-tensors " + dump.string());
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("tasks per kernel: add 1, add_scalar 2, mul 1"));
  CHECK_THAT(r.output, Catch::Contains("dumped 10 tensors"));  // add 3, add_scalar 2 + 2, mul 3
  int files = 0;
  fs::path mul_out;
  for (const auto& e : fs::directory_iterator(dump)) {
    ++files;
    const std::string n = e.path().filename().string();
    if (n.find("-mul-arg2.npy") != std::string::npos) mul_out = e.path();
  }
  CHECK(files == 10);
  REQUIRE_FALSE(mul_out.empty());
  // The mul task's output is f.
  auto bytes = [](const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  const std::string a = bytes(mul_out), b = bytes(dir.path / "o" / "f.npy");
  REQUIRE(a.size() == b.size());
  CHECK(a.substr(128) == b.substr(128));
}

TEST_CASE("pto2-run traces block tasks and pinned groups by cluster - the summary reports each cluster",
          "[pto2-run][trace]") {
  TempDir dir;
  const std::string trace = (dir.path / "trace.json").string();
  // The fused matmul: 32 blocks, each a cube + vector group pinned to a cluster.
  Result r = run(std::string(FUSED_MATMUL_DIR) + "/kernels.toml -o " + (dir.path / "o").string() + " --trace " + trace);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("C: PASS (16384/16384 elements matched)") &&
                           Catch::Contains("summary: 64 tasks (64 kernel runs on cores)") &&
                           Catch::Contains("clusters: 24/24 used") && Catch::Contains("per cluster"));
  std::ifstream in(trace);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (int c = 0; c < 24; ++c) CHECK_THAT(text, Catch::Contains("\"name\": \"cluster " + std::to_string(c) + "\""));
  CHECK_THAT(text, Catch::Contains("GEMM_PUSH [0/32]") && Catch::Contains("GELU_POP [31/32]"));
  // Every kernel span ran on the cluster it was pinned to.
  const std::regex span(R"re("cluster": (\d+), "block": \d+, "block_num": \d+, "pinned_cluster": (-?\d+))re");
  int spans = 0;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), span); it != std::sregex_iterator(); ++it) {
    CHECK((*it)[1] == (*it)[2]);
    ++spans;
  }
  CHECK(spans == 64);
}

TEST_CASE("pto2-run: the SPMD paged attention matches the reference as batch descriptors and expanded",
          "[pto2-run]") {
  TempDir dir;
  for (const char* mode : {"batch", "expand"}) {
    const std::string cmd = std::string("PTO2_BLOCK_MODE=") + mode + " " + PTO2_RUN_PATH + " " + PA_EXAMPLE_DIR +
                            "/kernels_spmd.toml -o " + (dir.path / mode).string() + " --summary 2>&1";
    FILE* p = popen(cmd.c_str(), "r");
    REQUIRE(p != nullptr);
    std::string out;
    std::array<char, 4096> buf;
    size_t n;
    while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
    INFO(mode << ": " << out);
    CHECK(pclose(p) == 0);
    CHECK_THAT(out, Catch::Contains("out: PASS (256/256 elements matched)"));
    // batch: HUB, 3 block tasks, 3 UPs; expand: 3 x (3 blocks + join) more.
    CHECK_THAT(out, Catch::Contains(std::string(mode) == "batch" ? "ran liborch_paged_attention_spmd.so: 7 tasks"
                                                                 : "ran liborch_paged_attention_spmd.so: 16 tasks"));
  }
}

TEST_CASE("pto2-run --repeat: bgemm and paged attention replay their captured region on fresh buffers, "
          "bit-identical to the recording run - and to capture off",
          "[pto2-run][capture]") {
  TempDir dir;
  for (const std::string example : {"bgemm", "paged_attention"}) {
    const std::string config = std::string(example == "bgemm" ? BGEMM_EXAMPLE_DIR : PA_EXAMPLE_DIR) + "/kernels.toml";
    const std::string on = (dir.path / (example + "-on")).string(), off = (dir.path / (example + "-off")).string();
    const Result r = run(config + " --repeat 3 -o " + on);
    INFO(example << ": " << r.output);
    CHECK(r.exit_code == 0);
    CHECK_THAT(r.output, Catch::Contains("run 1/3: ") && Catch::Contains("1 recorded, 0 replayed"));
    CHECK_THAT(r.output, Catch::Contains("run 3/3: ") && Catch::Contains("0 recorded, 1 replayed") &&
                             Catch::Contains("outputs bit-identical to run 1"));
    CHECK_THAT(r.output, Catch::Contains("PASS"));
    // The same run with capture off writes the same bytes.
    const Result plain = run_env("PTO2_CAPTURE_MODE=off", config + " -o " + off);
    INFO(plain.output);
    CHECK(plain.exit_code == 0);
    CHECK_THAT(plain.output, !Catch::Contains("captured regions"));
    for (const auto& entry : fs::directory_iterator(on)) {
      std::ifstream a(entry.path(), std::ios::binary), b(fs::path(off) / entry.path().filename(), std::ios::binary);
      const std::string x((std::istreambuf_iterator<char>(a)), {}), y((std::istreambuf_iterator<char>(b)), {});
      INFO(entry.path().filename());
      CHECK((!x.empty() && x == y));
    }
  }
}

TEST_CASE("pto2-run --platform tx8sim runs the same package and adds simulated time to summary and trace",
          "[pto2-run][tx8sim]") {
  TempDir dir;
  const std::string trace = (dir.path / "trace.json").string();
  Result r = run(std::string(BGEMM_EXAMPLE_DIR) + "/kernels.toml --platform tx8sim --trace " + trace);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("C: PASS (1024/1024 elements matched)") &&
                           Catch::Contains("on tx8sim, mesh 4x4") && Catch::Contains("NE cores") &&
                           Catch::Contains("tiles: ") && Catch::Contains("tx8sim (simulated time): 64 kernel runs") &&
                           Catch::Contains("per tile (busy, % of its 2 engines x simulated time)"));
  std::ifstream in(trace);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK_THAT(text, Catch::Contains("\"name\": \"tx8sim simulated time\"") && Catch::Contains("\"tile (0,0)\"") &&
                       Catch::Contains("\"tile (0,0) LSU\"") && Catch::Contains("\"name\": \"load (implicit)\"") &&
                       Catch::Contains("\"cat\": \"simulated\""));

  SECTION("a2a3sim's shape and unknown platforms are refused, naming the value") {
    Result bd = run(std::string(BGEMM_EXAMPLE_DIR) + "/kernels.toml --platform tx8sim --block-dim 4");
    CHECK(bd.exit_code == 2);
    CHECK_THAT(bd.output, Catch::Contains("--block-dim 4: block_dim is a2a3sim's clusters"));
    Result unknown = run(std::string(BGEMM_EXAMPLE_DIR) + "/kernels.toml --platform tx9");
    CHECK(unknown.exit_code == 2);
    CHECK_THAT(unknown.output, Catch::Contains("--platform tx9: must be one of a2a3sim, tx8sim"));
  }
  SECTION("a config's [runtime] platform and [tx8sim] settings are read and checked") {
    std::ifstream src(std::string(BGEMM_EXAMPLE_DIR) + "/kernels.toml");
    std::string cfg((std::istreambuf_iterator<char>(src)), std::istreambuf_iterator<char>());
    const std::string lib_dir = std::string(BGEMM_EXAMPLE_DIR) + "/";
    for (const char* lib :
         {"liborch_bgemm.so", "libkernel_bgemm_gemm.so", "libkernel_bgemm_add.so", "libgolden_bgemm.so"}) {
      const std::string quoted = std::string("\"") + lib + "\"";
      if (size_t at = cfg.find(quoted); at != std::string::npos)
        cfg.replace(at, quoted.size(), "\"" + lib_dir + lib + "\"");
    }
    auto write = [&](const std::string& name, const std::string& extra, const std::string& tail = "") {
      std::string text = cfg;
      text.replace(text.find("[runtime]"), 9, "[runtime]\n" + extra);
      text += "\n" + tail;
      const std::string path = (dir.path / name).string();
      std::ofstream(path) << text;
      return path;
    };
    Result named = run(write("named.toml", "platform = \"tx8sim\"") + " --summary");
    CHECK(named.exit_code == 0);
    CHECK_THAT(named.output, Catch::Contains("on tx8sim, mesh 4x4") && Catch::Contains("C: PASS"));
    Result mesh = run(write("mesh.toml", "platform = \"tx8sim\"", "[tx8sim]\nmesh = [2, 3]\n") + " --summary");
    INFO(mesh.output);
    CHECK_THAT(mesh.output, Catch::Contains("mesh 2x3") && Catch::Contains("C: PASS"));
    Result bad = run(write("bad.toml", "platform = \"tx7\""));
    CHECK(bad.exit_code == 2);
    CHECK_THAT(bad.output, Catch::Contains("[runtime] platform = 'tx7': must be \"a2a3sim\" or \"tx8sim\""));
  }
}
