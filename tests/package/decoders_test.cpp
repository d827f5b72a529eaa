// Decoders of outside bytes under the inputs that once crashed them or made
// them allocate more than the input justifies (docs/fuzzing.md): each gives a
// clear error.
#include <catch2/catch.hpp>

#include <cstring>
#include <string>
#include <vector>

#include "pto/package/chip_package.h"
#include "pto/package/npy.h"
#include "pto/package/toml_input.h"

using namespace pto2;
using namespace pto::package;

namespace {

std::vector<uint8_t> npy(const std::string& dict, size_t data_bytes, int version = 1) {
  std::string h = dict;
  const size_t prefix = version == 1 ? 10 : 12;
  h.append((64 - (prefix + h.size() + 1) % 64) % 64, ' ');
  h.push_back('\n');
  std::vector<uint8_t> out = {0x93, 'N', 'U', 'M', 'P', 'Y', uint8_t(version), 0};
  for (size_t i = 0; i < prefix - 8; ++i) out.push_back(uint8_t(h.size() >> (8 * i)));
  out.insert(out.end(), h.begin(), h.end());
  out.resize(out.size() + data_bytes, 0);
  return out;
}

Status parse(const std::vector<uint8_t>& b, NpyArray* a) { return parse_npy(b.data(), b.size(), "x.npy", a); }

}  // namespace

TEST_CASE(".npy: a good file parses - bad shapes and descrs are errors, not exceptions", "[decoders]") {
  NpyArray a;
  REQUIRE(parse(npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 24), &a).ok());
  CHECK(a.shape == std::vector<uint64_t>{2, 3});
  CHECK(a.data.size() == 24);
  for (const char* shape : {"(x, 3)", "(2, -3)", "(99999999999999999999999,)", "(2 3)", "(", "(1e3,)"}) {
    INFO(shape);
    Status s = parse(npy(std::string("{'descr': '<f4', 'fortran_order': False, 'shape': ") + shape + ", }", 24), &a);
    CHECK_FALSE(s.ok());
  }
  for (const char* descr : {"'<fx'", "'<f'", "'>f4'", "'<f3'", "f4", "'<f99999999999999999999'"}) {
    INFO(descr);
    CHECK_FALSE(
        parse(npy(std::string("{'descr': ") + descr + ", 'fortran_order': False, 'shape': (2,), }", 8), &a).ok());
  }
  // A product that wraps 64 bits.
  Status wrap = parse(npy("{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967297), }", 0), &a);
  CHECK_THAT(wrap.message, Catch::Contains("overflows"));
  // Data that does not match the shape.
  CHECK_THAT(parse(npy("{'descr': '<f4', 'fortran_order': False, 'shape': (8,), }", 16), &a).message,
             Catch::Contains("32 bytes of data"));
}

TEST_CASE(".npy: a 4 GiB header length is refused without allocating it", "[decoders]") {
  std::vector<uint8_t> b = {0x93, 'N', 'U', 'M', 'P', 'Y', 2, 0, 0xFF, 0xFF, 0xFF, 0xFF, '{', '}'};
  NpyArray a;
  Status s = parse(b, &a);
  CHECK_THAT(s.message, Catch::Contains("header of 4294967295 bytes"));
}

TEST_CASE("TOML: the bytes that reached undefined behaviour in toml++ are refused first", "[decoders]") {
  toml::table t;
  Status s = parse_toml_text(std::string("3\xEF\xBB\xBE", 4), "bundle", &t);
  CHECK_THAT(s.message, Catch::Contains("bundle: line 1") && Catch::Contains("non-ASCII"));
  CHECK_THAT(parse_toml_text("a = 1\nb = \"\xC3\x28\"\n", "x", &t).message,
             Catch::Contains("line 2") && Catch::Contains("not valid UTF-8"));
  CHECK_THAT(parse_toml_text("a = 1\x01", "x", &t).message, Catch::Contains("control character 0x01"));
  CHECK_THAT(parse_toml_text("a = \"open", "x", &t).message, Catch::Contains("string"));
  CHECK_THAT(parse_toml_text(std::string(kMaxTomlBytes + 1, '#'), "x", &t).message, Catch::Contains("at most"));
  // Non-ASCII in strings and comments is TOML and is kept.
  REQUIRE(
      parse_toml_text("# caf\xC3\xA9\nname = \"caf\xC3\xA9\" # \xE2\x9C\x93\nm = '''\n\xC3\xA9\n'''\n", "x", &t).ok());
  CHECK(t["name"].value_or(std::string()) == "caf\xC3\xA9");
}

TEST_CASE("kernel config: a shape whose size wraps 64 bits is refused - integer keys must be integers", "[decoders]") {
  const std::string head =
      "[orchestration]\nlibrary = \"o.so\"\n[[kernels]]\nfunc_id = 0\nlibrary = \"k.so\"\ncore_type = \"aiv\"\n";
  ChipConfig c;
  Status s = ChipConfig::parse(head +
                                   "[[args]]\nname = \"x\"\nrole = \"input\"\ndtype = \"float32\"\n"
                                   "shape = [4611686018427387905, 4]\n",
                               "/b/kernels.toml", &c);
  CHECK_THAT(s.message, Catch::Contains("args[0] (x)") && Catch::Contains("larger than"));
  s = ChipConfig::parse(head + "[runtime]\ntask_window = 1e30\n[[args]]\nname = \"n\"\nrole = \"scalar\"\nvalue = 1\n",
                        "/b/kernels.toml", &c);
  CHECK_THAT(s.message, Catch::Contains("task_window must be an integer"));
  s = ChipConfig::parse(
      head + "[runtime]\nblock_dim = 4294967297\n[[args]]\nname = \"n\"\nrole = \"scalar\"\nvalue = 1\n",
      "/b/kernels.toml", &c);
  CHECK_THAT(s.message, Catch::Contains("block_dim must be an integer in 1..1024"));
}
