// The C++ client's raw download reader (docs/proto.md, "Transfers as raw
// bytes") against a scripted Tensors service that sends chunks no ptod
// sends: each fault is a DATA_LOSS naming it, never a crash or a wrong
// tensor; chunks cut anyhow by protobuf are read byte-exact.
#include <grpcpp/grpcpp.h>

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "pto/base/crc32c.h"
#include "pto/client.h"
#include "pto/v1/ptod.grpc.pb.h"

namespace v1 = pto::v1;

namespace {

// Download answers the messages of `script` as they are (raw bytes).
class Scripted final : public v1::Tensors::WithRawCallbackMethod_Download<v1::Tensors::Service> {
 public:
  std::vector<std::string> script;
  grpc::ServerWriteReactor<grpc::ByteBuffer>* Download(grpc::CallbackServerContext*, const grpc::ByteBuffer*) override {
    class Writer final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
     public:
      explicit Writer(std::vector<std::string> s) : s_(std::move(s)) { next(); }
      void OnWriteDone(bool ok) override {
        if (!ok) return Finish(grpc::Status::CANCELLED);
        next();
      }
      void OnDone() override { delete this; }

     private:
      void next() {
        if (i_ == s_.size()) return Finish(grpc::Status::OK);
        grpc::Slice slice(s_[i_++]);
        buf_ = grpc::ByteBuffer(&slice, 1);
        StartWrite(&buf_);
      }
      std::vector<std::string> s_;
      size_t i_ = 0;
      grpc::ByteBuffer buf_;
    };
    return new Writer(script);
  }
};

struct Server {
  Scripted svc;
  std::unique_ptr<grpc::Server> server;
  int port = 0;
  explicit Server(std::vector<std::string> script) {
    svc.script = std::move(script);
    grpc::ServerBuilder b;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    b.RegisterService(&svc);
    server = b.BuildAndStart();
    REQUIRE(server);
  }
  ~Server() { server->Shutdown(); }
  pto::client::Result<v1::TensorInfo> download(std::vector<uint8_t>* out) {
    pto::client::ClientOptions o;
    o.address = "127.0.0.1:" + std::to_string(port);
    o.timeout = std::chrono::seconds(20);
    pto::client::Client c(o);
    v1::TensorHandle h;
    h.set_id(1);
    return c.download(h, out);
  }
};

// info_bytes > 0: the chunk describes a UINT8 tensor of that many bytes.
std::string chunk(uint64_t info_bytes, const std::string& data, bool last, uint32_t crc) {
  v1::DownloadChunk c;
  if (info_bytes) {
    c.mutable_info()->set_bytes(info_bytes);
    c.mutable_info()->add_shape(static_cast<uint32_t>(info_bytes));
    c.mutable_info()->set_dtype(v1::UINT8);
  }
  c.set_data(data);
  c.set_last(last);
  if (last) c.set_crc32c(crc);
  return c.SerializeAsString();
}

}  // namespace

TEST_CASE("a download in several chunks is read byte-exact and its checksum checked") {
  std::string all;
  for (int i = 0; i < 300000; ++i) all.push_back(static_cast<char>(i * 7));
  const uint32_t crc = pto::crc32c(0, all.data(), all.size());
  Server s({chunk(all.size(), all.substr(0, 100000), false, 0), chunk(0, all.substr(100000, 150000), false, 0),
            chunk(0, all.substr(250000), true, crc)});
  std::vector<uint8_t> got;
  auto r = s.download(&got);
  INFO(r.status.message);
  REQUIRE(r.ok());
  CHECK(r.value.bytes() == all.size());
  CHECK(std::string(got.begin(), got.end()) == all);
}

TEST_CASE("a download's faults are DATA_LOSS naming them") {
  const auto loss = static_cast<int>(grpc::StatusCode::DATA_LOSS);
  const std::string d(1000, 'x');
  const uint32_t crc = pto::crc32c(0, d.data(), d.size());
  std::vector<uint8_t> got;
  SECTION("a wrong checksum") {
    Server s({chunk(1000, d, true, crc ^ 1)});
    auto r = s.download(&got);
    CHECK(r.status.code == loss);
    CHECK_THAT(r.status.message, Catch::Contains("CRC-32C"));
  }
  SECTION("no last chunk") {
    Server s({chunk(1000, d, false, 0)});
    auto r = s.download(&got);
    CHECK(r.status.code == loss);
    CHECK_THAT(r.status.message, Catch::Contains("without its last chunk"));
  }
  SECTION("more bytes than the tensor holds") {
    Server s({chunk(500, d, true, crc)});
    auto r = s.download(&got);
    CHECK(r.status.code == loss);
    CHECK_THAT(r.status.message, Catch::Contains("more than the tensor's 500 bytes"));
    CHECK(got.size() <= 500);
  }
  SECTION("a length past the end of the message") {
    Server s({chunk(1000, "", false, 0) + std::string("\x12\xe8\x07"
                                                      "short",
                                                      8)});
    auto r = s.download(&got);
    CHECK(r.status.code == loss);
    CHECK_THAT(r.status.message, Catch::Contains("malformed chunk") && Catch::Contains("past the end"));
  }
  SECTION("a second description") {
    Server s({chunk(1000, d.substr(0, 10), false, 0), chunk(2000, d.substr(10), true, crc)});
    auto r = s.download(&got);
    CHECK(r.status.code == loss);
    CHECK_THAT(r.status.message, Catch::Contains("a second description"));
  }
  SECTION("a size its shape and dtype do not make (the room made is the daemon's word)") {
    v1::DownloadChunk c;
    c.mutable_info()->set_bytes(uint64_t(1) << 62);
    c.mutable_info()->add_shape(4);
    c.mutable_info()->set_dtype(v1::FLOAT32);
    Server s({c.SerializeAsString()});
    auto r = s.download(&got);
    CHECK(r.status.code == loss);
    CHECK_THAT(r.status.message, Catch::Contains("its shape and dtype make 16"));
  }
  SECTION("a description that is not one") {
    Server s({std::string("\x0a\x02\xff\xff", 4)});
    auto r = s.download(&got);
    CHECK(r.status.code == loss);
    CHECK_THAT(r.status.message, Catch::Contains("description cannot be read"));
  }
}
