// The mailbox wire format: the args blob [int32 T][int32 S][Tensor x T][uint64 x S]
// and the control payload, encoded and decoded; malformed blobs are refused.
#include <catch2/catch.hpp>
#include <cstring>

#include "mailbox.h"

using namespace pto;

TEST_CASE("an args blob round-trips and has the documented layout") {
  float data[6] = {};
  TaskArgs a;
  a.add_tensor(make_tensor(data, {2, 3}, PTO_FLOAT32), OUT).add_scalar(42).add_scalar_f32(1.5f);
  std::vector<uint8_t> blob;
  encode_args(a.view(), &blob);
  REQUIRE(blob.size() == 8 + 40 * 1 + 8 * 2);
  int32_t t, s;
  std::memcpy(&t, blob.data(), 4);
  std::memcpy(&s, blob.data() + 4, 4);
  CHECK(t == 1);
  CHECK(s == 2);
  uint64_t addr;
  std::memcpy(&addr, blob.data() + 8, 8);
  CHECK(addr == reinterpret_cast<uint64_t>(data));
  uint64_t s0;
  std::memcpy(&s0, blob.data() + 48, 8);
  CHECK(s0 == 42);
  // Mailbox-aligned copy, as a child sees it.
  alignas(64) uint8_t box[256];
  std::memcpy(box, blob.data(), blob.size());
  TaskArgsView v{};
  REQUIRE(decode_args(box, blob.size(), &v).ok());
  CHECK(v.tensor_count == 1);
  CHECK(v.tensors[0].shape[1] == 3);
  CHECK(v.tensors[0].ndims == 2);
  CHECK(pto_tensor_bytes(&v.tensors[0]) == 24);
  CHECK(v.scalars[0] == 42);
  float f;
  std::memcpy(&f, &v.scalars[1], 4);
  CHECK(f == 1.5f);
}

TEST_CASE("a blob whose header does not fit its bytes is refused - naming the counts") {
  alignas(64) uint8_t box[64] = {};
  int32_t t = 3, s = 0;
  std::memcpy(box, &t, 4);
  std::memcpy(box + 4, &s, 4);
  TaskArgsView v{};
  Status st = decode_args(box, sizeof box, &v);
  CHECK_FALSE(st.ok());
  CHECK_THAT(st.message, Catch::Contains("3 tensors") && Catch::Contains("64 bytes"));
  t = -1;
  std::memcpy(box, &t, 4);
  CHECK_FALSE(decode_args(box, sizeof box, &v).ok());
  CHECK_FALSE(decode_args(box, 4, &v).ok());
}

TEST_CASE("mailbox capacity and state names") {
  CHECK(sizeof(Mailbox) == kMailboxBytes);
  CHECK(blob_size(kMaxBlobTensors, 0) <= kMailboxBlobCapacity);
  CHECK(blob_size(kMaxBlobTensors + 1, 0) > kMailboxBlobCapacity);
  CHECK(std::string(mailbox_state_name(MB_TASK_READY)) == "TASK_READY");
  CHECK(std::string(mailbox_state_name(MB_INIT_FAILED)) == "INIT_FAILED");
  CHECK(std::string(mailbox_state_name(99)) == "UNKNOWN");
  Mailbox* m = new Mailbox();
  m->set_error(5, std::string(2000, 'x'));
  CHECK(m->error() == std::string(2000, 'x'));  // whole: the text lives in the blob
  m->set_error(5, std::string(20000, 'x'));
  CHECK(m->error().size() <= pto::kMaxMessageBytes);
  CHECK_THAT(m->error(), Catch::Contains("bytes cut"));
  m->clear_error();
  CHECK(m->error().empty());
  delete m;
}

TEST_CASE("a control payload round-trips - a truncated one is refused") {
  ControlDescriptor d{CallableKind::NATIVE_IMPORT, EntryAbi::SUB, "/lib/x.so", "sym", ""};
  auto bytes = encode_control(d);
  ControlDescriptor e;
  REQUIRE(decode_control(bytes.data(), bytes.size(), &e).ok());
  CHECK(e.path == "/lib/x.so");
  CHECK(e.symbol == "sym");
  CHECK(e.kind == CallableKind::NATIVE_IMPORT);
  CHECK_FALSE(decode_control(bytes.data(), bytes.size() - 2, &e).ok());
}
