// Warm arena pages (docs/worker.md, "Warm arena pages"): a file-backed
// arena keeps the pages of freed buffers, up to arena_warm_bytes, for the
// next buffers there; an allocation that promises zeros never shows what
// they held, in this process or after a restart.
#include <unistd.h>

#include <filesystem>

#include "warm_ranges.h"
#include "worker_support.h"

using namespace pto;
using namespace pto_test;

namespace {

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/pto-warm-XXXXXX";
    REQUIRE(mkdtemp(tmpl));
    path = tmpl;
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

WorkerConfig arena_config(const std::string& file, uint64_t warm) {
  WorkerConfig c{.level = 3, .num_chips = 0, .num_sub_workers = 0, .buffer_arena_bytes = 4 << 20, .arena_file = file};
  c.arena_warm_bytes = warm;
  return c;
}

bool all_equal(const ContinuousTensor& t, float v) {
  for (uint64_t i = 0; i < pto_tensor_numel(&t); ++i)
    if (f32(t)[i] != v) return false;
  return true;
}

}  // namespace

TEST_CASE("WarmRanges keeps freed ranges up to its cap and carves what an allocation takes") {
  WarmRanges w;
  w.set_cap(1000);
  auto rest = w.keep(0, 600);
  CHECK(rest.second == 0);
  rest = w.keep(4096, 600);  // 400 fit under the cap
  CHECK(rest == WarmRanges::Range{4496, 200});
  CHECK(w.kept_bytes() == 1000);
  CHECK(w.keep(9000, 10).second == 10);  // full
  // An allocation over the middle of the first range: both outer parts stay.
  auto t = w.take(100, 200);
  REQUIRE(t.kept.size() == 1);
  CHECK(t.kept[0] == WarmRanges::Range{100, 200});
  CHECK(t.unknown.empty());
  CHECK(w.kept_bytes() == 800);
  // One spanning the rest of the first range, a gap and part of the second.
  t = w.take(0, 4096 + 50);
  REQUIRE(t.kept.size() == 3);
  CHECK(t.kept[0] == WarmRanges::Range{0, 100});
  CHECK(t.kept[1] == WarmRanges::Range{300, 300});
  CHECK(t.kept[2] == WarmRanges::Range{4096, 50});
  CHECK(w.kept_bytes() == 350);
  CHECK(w.take(0, 4096).kept.empty());
  // Unknown ranges come back as such and do not count against the cap.
  w.adopt_unknown(1 << 20, 1 << 20);
  CHECK(w.kept_bytes() == 350);
  t = w.take((1 << 20) + 10, 20);
  CHECK(t.kept.empty());
  REQUIRE(t.unknown.size() == 1);
  CHECK(t.unknown[0] == WarmRanges::Range{(1 << 20) + 10, 20});
  CHECK(w.take((1 << 20) + 10, 20).unknown.empty());
}

TEST_CASE("a freed buffer's pages stay warm for an upload-style allocation - a zeroing one never shows them") {
  TempDir dir;
  Worker w(arena_config(dir.path + "/arena", 1 << 20));
  REQUIRE(w.init().ok());
  ContinuousTensor x = alloc_f32(w, 1000);
  const uint64_t len = w.stats().arena_in_use;
  fill(x, 7.f, 0.f);
  REQUIRE(w.free(x).ok());
  CHECK(w.stats().arena_warm == len);
  // Taken as it is: the same place, its pages (and so x's bytes) kept.
  auto y = w.alloc_to_overwrite({1000}, PTO_FLOAT32);
  REQUIRE(y.ok());
  CHECK(y.value.data == x.data);
  CHECK(all_equal(y.value, 7.f));
  CHECK(w.stats().arena_warm == 0);
  // Written through write(): into the pages in memory.
  std::vector<float> ones(1000, 1.f);
  REQUIRE(w.write(y.value, 0, ones.data(), ones.size() * 4).ok());
  CHECK(all_equal(y.value, 1.f));
  REQUIRE(w.free(y.value).ok());
  CHECK(w.stats().arena_warm == len);
  // A plain alloc over them reads zeros, and so does alloc_at of a range
  // freed in this process.
  auto z = w.alloc({1000}, PTO_FLOAT32);
  REQUIRE(z.ok());
  CHECK(z.value.data == x.data);
  CHECK(all_equal(z.value, 0.f));
  fill(z.value, 3.f, 0.f);
  const uint64_t off = w.arena_offset(z.value);
  REQUIRE(w.free(z.value).ok());
  auto a = w.alloc_at(off, {1000}, PTO_FLOAT32);
  REQUIRE(a.ok());
  CHECK(all_equal(a.value, 0.f));
  REQUIRE(w.close().ok());
}

TEST_CASE("arena_warm_bytes bounds what is kept - 0 returns every freed page at once") {
  TempDir dir;
  SECTION("a cap smaller than the buffer keeps its first part") {
    Worker w(arena_config(dir.path + "/arena", 8192));
    REQUIRE(w.init().ok());
    ContinuousTensor x = alloc_f32(w, 4096);  // 16 KiB
    fill(x, 5.f, 0.f);
    REQUIRE(w.free(x).ok());
    CHECK(w.stats().arena_warm == 8192);
    auto y = w.alloc_to_overwrite({4096}, PTO_FLOAT32);
    REQUIRE(y.ok());
    REQUIRE(y.value.data == x.data);
    CHECK(f32(y.value)[0] == 5.f);
    CHECK(f32(y.value)[2047] == 5.f);
    CHECK(f32(y.value)[2048] == 0.f);  // punched
    CHECK(f32(y.value)[4095] == 0.f);
    REQUIRE(w.close().ok());
  }
  SECTION("0") {
    Worker w(arena_config(dir.path + "/arena", 0));
    REQUIRE(w.init().ok());
    ContinuousTensor x = alloc_f32(w, 1000);
    fill(x, 5.f, 0.f);
    REQUIRE(w.free(x).ok());
    CHECK(w.stats().arena_warm == 0);
    auto y = w.alloc_to_overwrite({1000}, PTO_FLOAT32);
    REQUIRE(y.ok());
    REQUIRE(y.value.data == x.data);
    CHECK(all_equal(y.value, 0.f));
    REQUIRE(w.close().ok());
  }
}

TEST_CASE("warm pages an earlier process left in the arena file never show through a zeroing alloc") {
  TempDir dir;
  const std::string file = dir.path + "/arena";
  uint64_t kept_at = 0;
  uint64_t kept_data = 0;
  {
    Worker w(arena_config(file, 1 << 20));
    REQUIRE(w.init().ok());
    ContinuousTensor keep = alloc_f32(w, 1000);  // survives: re-attached below
    fill(keep, 2.f, 0.f);
    ContinuousTensor x = alloc_f32(w, 1000);
    fill(x, 9.f, 0.f);
    kept_at = w.arena_offset(keep);
    kept_data = w.arena_offset(x);
    REQUIRE(w.free(x).ok());  // kept warm, in the file
    CHECK(w.stats().arena_warm > 0);
    REQUIRE(w.close().ok());
  }
  Worker w(arena_config(file, 1 << 20));
  REQUIRE(w.init().ok());
  auto keep = w.alloc_at(kept_at, {1000}, PTO_FLOAT32);
  REQUIRE(keep.ok());
  CHECK(all_equal(keep.value, 2.f));
  auto z = w.alloc({1000}, PTO_FLOAT32);
  REQUIRE(z.ok());
  REQUIRE(w.arena_offset(z.value) == kept_data);
  CHECK(all_equal(z.value, 0.f));
  REQUIRE(w.close().ok());
}
