// Principals and ownership (docs/daemon.md, "Principals"): every tensor, job
// and callable belongs to the principal that made it; another principal is
// told it does not exist (NOT_FOUND, for every RPC), unless it is admin; a
// published callable is everyone's to run; quotas answer RESOURCE_EXHAUSTED
// naming the quota. Principals come from named tokens (on the unix socket
// too) and, without a token, from the connecting user (SO_PEERCRED).
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "daemon_client.h"
#include "daemon_process.h"
#include "eventually.h"
#include "pto/client.h"

using namespace pto_test;
namespace v1 = pto::v1;
using SC = grpc::StatusCode;

namespace {

const std::string kAlice = "alice-token-0123456789";
const std::string kBob = "bob-token-0123456789ab";
const std::string kOps = "ops-admin-token-012345";

// A daemon with the three named tokens and the given extra config.
struct Tenants {
  std::string dir = make_temp_dir("ptod-tenants");
  std::unique_ptr<DaemonProcess> d;
  explicit Tenants(const std::string& extra = "", int chips = 1) {
    std::ostringstream tokens;
    tokens << "# name role token\nalice user " << kAlice << "\nbob user " << kBob << "\nops admin " << kOps << "\n";
    write_secret(dir + "/tokens", tokens.str());
    std::ofstream(dir + "/ptod.toml") << "[server]\ntokens_file = \"" << dir << "/tokens\"\n" << extra;
    d = std::make_unique<DaemonProcess>(std::vector<std::string>{"--config", dir + "/ptod.toml"}, chips);
  }
  ~Tenants() {
    d.reset();
    std::filesystem::remove_all(dir);
  }
  std::unique_ptr<pto::client::Client> as(const std::string& token) const {
    pto::client::ClientOptions o;
    o.address = d->address();
    o.token = token;
    o.timeout = std::chrono::seconds(30);
    return std::make_unique<pto::client::Client>(o);
  }
};

SC code(const pto::client::Status& s) { return static_cast<SC>(s.code); }

v1::TensorHandle by_id(uint64_t id) {
  v1::TensorHandle h;
  h.set_id(id);
  return h;
}
v1::TensorHandle by_name(const std::string& n) {
  v1::TensorHandle h;
  h.set_name(n);
  return h;
}
v1::CallableRef callable(const std::string& n) {
  v1::CallableRef r;
  r.set_name(n);
  return r;
}

// vector: f = (a + b + 1) * (a + b + 2), on three tensors.
v1::SubmitRequest vector_job(const v1::TensorHandle& a, const v1::TensorHandle& b, const v1::TensorHandle& f) {
  v1::SubmitRequest req;
  req.mutable_callable()->set_name("vector");
  for (const auto* t : {&a, &b, &f}) *req.mutable_args()->add_tensors()->mutable_tensor() = *t;
  req.mutable_args()->add_tags(v1::INPUT);
  req.mutable_args()->add_tags(v1::INPUT);
  req.mutable_args()->add_tags(v1::OUTPUT);
  req.mutable_args()->add_scalars(16384);
  return req;
}

v1::SubmitRequest sleep_job(uint64_t ms) {
  v1::SubmitRequest req;
  req.mutable_callable()->set_name("sleep");
  req.mutable_args()->add_scalars(ms);
  return req;
}

}  // namespace

TEST_CASE("another principal is told what it does not own does not exist - for every RPC") {
  Tenants t;
  REQUIRE(t.d->up());
  auto alice = t.as(kAlice), bob = t.as(kBob);
  REQUIRE(alice->register_chip(VECTOR_CONFIG, "vector").ok());
  REQUIRE(alice->register_chip(SLEEP_CONFIG, "sleep").ok());
  std::vector<float> ones(16384, 1.f);
  auto a = alice->upload("a", {16384}, PTO_FLOAT32, ones.data(), ones.size() * 4);
  auto f = alice->alloc("f", {16384}, PTO_FLOAT32);
  REQUIRE((a.ok() && f.ok()));
  CHECK(a.value.owner() == "alice");
  auto job = alice->submit(sleep_job(30000));
  REQUIRE(job.ok());
  const uint64_t jid = job.value.job_id();

  // Tensors: list, download, free, use in a job - by id and by name.
  CHECK(bob->tensors().value.tensors_size() == 0);
  std::vector<uint8_t> got;
  CHECK(code(bob->download(by_id(a.value.handle().id()), &got).status) == SC::NOT_FOUND);
  CHECK(code(bob->download(by_name("a"), &got).status) == SC::NOT_FOUND);
  CHECK(code(bob->free(by_id(a.value.handle().id()))) == SC::NOT_FOUND);
  // The same words as for an id that does not exist: nothing is told.
  auto missing = bob->free(by_id(999999));
  auto theirs = bob->free(by_id(a.value.handle().id()));
  CHECK(theirs.message == "no tensor with id " + std::to_string(a.value.handle().id()));
  CHECK(missing.message == "no tensor with id 999999");
  // Callables: not listed, not runnable, not removable.
  CHECK(bob->callables().value.callables_size() == 0);
  CHECK(code(bob->submit(sleep_job(1)).status) == SC::NOT_FOUND);
  CHECK(code(bob->unregister(callable("vector"))) == SC::NOT_FOUND);
  CHECK(code(bob->publish(callable("vector"))) == SC::NOT_FOUND);
  // Jobs: result, watch, cancel, list.
  CHECK(code(bob->result(jid).status) == SC::NOT_FOUND);
  CHECK(code(bob->watch(jid, {}).status) == SC::NOT_FOUND);
  CHECK(code(bob->cancel(jid).status) == SC::NOT_FOUND);
  CHECK(bob->jobs().value.jobs_size() == 0);
  // Names are per principal: bob's own "a" is another tensor.
  auto bob_a = bob->alloc("a", {4}, PTO_FLOAT32);
  REQUIRE(bob_a.ok());
  CHECK(bob_a.value.handle().id() != a.value.handle().id());
  // A job of bob's may not name alice's tensor either.
  auto bf = bob->alloc("bf", {16384}, PTO_FLOAT32);
  REQUIRE(bf.ok());
  CHECK(code(bob->submit(vector_job(by_id(a.value.handle().id()), by_id(a.value.handle().id()), bf.value.handle()))
                 .status) == SC::NOT_FOUND);

  // Alice still has all of hers.
  auto mine = alice->result(jid);
  REQUIRE(mine.ok());
  CHECK(mine.value.owner() == "alice");
  CHECK(mine.value.callable() == "sleep");
  CHECK(alice->tensors().value.tensors_size() == 2);
  REQUIRE(alice->cancel(jid).ok());
  auto owners = alice->callables();
  REQUIRE(owners.ok());
  REQUIRE(owners.value.callables_size() == 2);
  CHECK(owners.value.callables(0).owners(0) == "alice");
}

TEST_CASE("a published callable is everyone's to run, not to unregister - admins see and do everything") {
  Tenants t;
  REQUIRE(t.d->up());
  auto alice = t.as(kAlice), bob = t.as(kBob), ops = t.as(kOps);
  REQUIRE(alice->register_chip(VECTOR_CONFIG, "vector").ok());
  REQUIRE(alice->publish(callable("vector")).ok());
  // Bob runs it on his own tensors.
  std::vector<float> x(16384, 0.5f);
  auto a = bob->upload("a", {16384}, PTO_FLOAT32, x.data(), x.size() * 4);
  auto f = bob->alloc("f", {16384}, PTO_FLOAT32);
  REQUIRE((a.ok() && f.ok()));
  auto r = bob->run(vector_job(a.value.handle(), a.value.handle(), f.value.handle()));
  REQUIRE(r.ok());
  INFO(r.value.message());
  REQUIRE(r.value.state() == v1::SUCCEEDED);
  std::vector<uint8_t> got;
  REQUIRE(bob->download(f.value.handle(), &got).ok());
  float f0;
  std::memcpy(&f0, got.data(), 4);
  CHECK(f0 == Approx((1.f + 1) * (1.f + 2)));
  auto listed = bob->callables();
  REQUIRE(listed.ok());
  REQUIRE(listed.value.callables_size() == 1);
  CHECK(listed.value.callables(0).published());
  // ... but it is not his to remove or to withdraw.
  auto un = bob->unregister(callable("vector"));
  CHECK(code(un) == SC::PERMISSION_DENIED);
  CHECK_THAT(un.message, Catch::Contains("published by alice"));
  CHECK(code(bob->publish(callable("vector"), false)) == SC::PERMISSION_DENIED);
  // Registering the same content makes bob an owner too; his unregister then only lets go.
  REQUIRE(bob->register_chip(VECTOR_CONFIG, "vector").ok());
  REQUIRE(alice->publish(callable("vector"), false).ok());
  REQUIRE(bob->callables().value.callables_size() == 1);
  REQUIRE(bob->unregister(callable("vector")).ok());
  CHECK(bob->callables().value.callables_size() == 0);
  CHECK(alice->callables().value.callables_size() == 1);

  // The admin: sees every tensor and job, reads and frees them, cancels and unregisters.
  auto all = ops->tensors();
  REQUIRE(all.ok());
  CHECK(all.value.tensors_size() == 2);
  CHECK(ops->jobs().value.jobs_size() == 1);
  REQUIRE(ops->download(by_id(f.value.handle().id()), &got).ok());
  REQUIRE(ops->free(by_id(a.value.handle().id())).ok());
  CHECK(bob->tensors().value.tensors_size() == 1);
  REQUIRE(ops->unregister(callable("vector")).ok());
  CHECK(alice->callables().value.callables_size() == 0);
  // The unix user root (no token) is admin too.
  CHECK(connect(*t.d)->tensors().value.tensors_size() == 1);
  // A token the daemon does not know is refused, on the unix socket too.
  auto stranger = t.as("not-a-token-of-this-daemon");
  CHECK(code(stranger->tensors().status) == SC::UNAUTHENTICATED);
}

TEST_CASE("quotas per principal: arena bytes and queued jobs - RESOURCE_EXHAUSTED naming the quota") {
  Tenants t(
      "[jobs]\nmax_running = 1\n[quotas]\narena_bytes = 1048576\nqueued_jobs = 1\n"
      "[quotas.bob]\narena_bytes = 4194304\n");
  REQUIRE(t.d->up());
  auto alice = t.as(kAlice), bob = t.as(kBob);
  REQUIRE(alice->register_chip(SLEEP_CONFIG, "sleep").ok());
  REQUIRE(alice->publish(callable("sleep")).ok());
  // Arena bytes: alice may hold 1 MiB, bob 4 MiB.
  std::vector<uint8_t> mib(1 << 20, 7);
  REQUIRE(alice->upload("one", {1 << 20}, PTO_UINT8, mib.data(), mib.size()).ok());
  auto over = alice->upload("two", {1 << 20}, PTO_UINT8, mib.data(), mib.size());
  CHECK(code(over.status) == SC::RESOURCE_EXHAUSTED);
  CHECK_THAT(over.status.message, Catch::Contains("alice") && Catch::Contains("quota of 1048576 bytes") &&
                                      Catch::Contains("[quotas] arena_bytes"));
  CHECK(code(alice->alloc("three", {16}, PTO_UINT8).status) == SC::RESOURCE_EXHAUSTED);
  for (const char* name : {"b0", "b1", "b2"})
    REQUIRE(bob->upload(name, {1 << 20}, PTO_UINT8, mib.data(), mib.size()).ok());
  // Freeing gives the room back.
  REQUIRE(alice->free(by_name("one")).ok());
  REQUIRE(alice->upload("two", {1 << 20}, PTO_UINT8, mib.data(), mib.size()).ok());
  // Queued jobs: one running (max_running = 1), one queued; a second queued one is refused.
  auto running = alice->submit(sleep_job(30000));
  REQUIRE(running.ok());
  REQUIRE(eventually([&] { return alice->result(running.value.job_id()).value.state() == v1::RUNNING; }));
  REQUIRE(alice->submit(sleep_job(1)).ok());
  auto refused = alice->submit(sleep_job(1));
  CHECK(code(refused.status) == SC::RESOURCE_EXHAUSTED);
  CHECK_THAT(refused.status.message, Catch::Contains("queued_jobs"));
  REQUIRE(bob->submit(sleep_job(1)).ok());  // another principal's quota is its own
  REQUIRE(alice->cancel(running.value.job_id()).ok());
}

TEST_CASE("without a token, the principal is the unix user that connected (SO_PEERCRED)") {
  Tenants t;
  REQUIRE(t.d->up());
  // The daemon's user (root here, or whoever runs the test) is admin.
  auto me = connect(*t.d);
  auto mine = me->alloc("mine", {4}, PTO_FLOAT32);
  REQUIRE(mine.ok());
  CHECK(mine.value.owner() == (geteuid() == 0 ? "root" : mine.value.owner()));
  if (geteuid() != 0) {
    WARN("not root: the test cannot connect as another user; only the own user was checked");
    return;
  }
  // nobody (uid 65534) connects with ptoctl: its tensor is its own, it sees no other.
  chmod(t.d->dir().c_str(), 0755);
  chmod((t.d->dir() + "/ptod.sock").c_str(), 0666);
  auto as_nobody = [&](std::vector<std::string> args) {
    std::vector<std::string> argv = {"/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                                     PTOCTL_PATH,        "--address",     t.d->address()};
    argv.insert(argv.end(), args.begin(), args.end());
    return run_command(argv, 30);
  };
  Output alloc = as_nobody({"alloc", "--shape", "8", "-n", "theirs"});
  INFO(alloc.text);
  REQUIRE(alloc.code == 0);
  CHECK_THAT(alloc.text, Catch::Contains("owner nobody"));
  Output list = as_nobody({"tensors"});
  INFO(list.text);
  CHECK_THAT(list.text, Catch::Contains("theirs") && Catch::Contains("nobody") && !Catch::Contains("mine"));
  Output down = as_nobody({"download", "mine", "-o", "/tmp/never.npy"});
  CHECK(down.code != 0);
  CHECK_THAT(down.text, Catch::Contains("no tensor named 'mine'"));
  // root sees both.
  CHECK(me->tensors().value.tensors_size() == 2);
}

TEST_CASE("a token that matches no principal is refused by every service - the node's too") {
  Tenants t;
  REQUIRE(t.d->up());
  auto stranger = t.as("no-such-token-0123456789");
  // Before: Node's Version, Workers and Config answered it (an operator checking a revoked token saw it work).
  CHECK(code(stranger->version().status) == SC::UNAUTHENTICATED);
  CHECK(code(stranger->workers().status) == SC::UNAUTHENTICATED);
  CHECK(code(stranger->config().status) == SC::UNAUTHENTICATED);
  CHECK(code(stranger->tensors().status) == SC::UNAUTHENTICATED);
  // A known token, and none at all (the unix socket's user), are answered.
  CHECK(t.as(kAlice)->version().ok());
  CHECK(t.as("")->workers().ok());
}
