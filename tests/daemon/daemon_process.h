// A real ptod (or ptoctl) as a subprocess of a test: temporary state
// directory and socket, ephemeral ports, bounded start and stop.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

namespace pto_test {

inline std::string make_temp_dir(const char* stem) {
  std::string t = (std::filesystem::temp_directory_path() / (std::string(stem) + "-XXXXXX")).string();
  if (!mkdtemp(t.data())) return {};
  return t;
}

// Runs argv to completion (bounded), capturing stdout+stderr.
struct Output {
  int code = -1;  // exit status, or 128 + signal, or -1 if it had to be killed
  std::string text;
};
// Starts argv (with env added) in the background, its stdout and stderr
// into a pipe: the pipe's read end, -1 on failure; *pid the child.
inline int spawn_command(const std::vector<std::string>& argv, const std::vector<std::string>& env, pid_t* pid) {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  *pid = fork();
  if (*pid == 0) {
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    close(fds[0]);
    close(fds[1]);
    for (const auto& e : env) putenv(const_cast<char*>(e.c_str()));
    std::vector<char*> a;
    for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
    a.push_back(nullptr);
    execv(a[0], a.data());
    _exit(127);
  }
  close(fds[1]);
  return fds[0];
}

inline Output run_command(const std::vector<std::string>& argv, int timeout_s = 60,
                          const std::vector<std::string>& env = {}) {
  Output out;
  int fds[2];
  pid_t pid = -1;
  fds[0] = spawn_command(argv, env, &pid);
  if (fds[0] < 0) return out;
  fcntl(fds[0], F_SETFL, O_NONBLOCK);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  char buf[4096];
  int status = 0;
  for (;;) {
    ssize_t n;
    while ((n = read(fds[0], buf, sizeof buf)) > 0) out.text.append(buf, static_cast<size_t>(n));
    if (waitpid(pid, &status, WNOHANG) == pid) {
      while ((n = read(fds[0], buf, sizeof buf)) > 0) out.text.append(buf, static_cast<size_t>(n));
      out.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      break;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      out.code = -1;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  close(fds[0]);
  return out;
}

// GET path from 127.0.0.1:port (HTTP/1.0): the whole response, "" on failure.
inline std::string http_request(int port, const std::string& method, const std::string& path) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  const timeval bound{5, 0};  // a server that never answers is a failure, not a hang
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &bound, sizeof bound);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &bound, sizeof bound);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string out;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
    const std::string req = method + " " + path + " HTTP/1.0\r\n\r\n";
    if (write(fd, req.data(), req.size()) == static_cast<ssize_t>(req.size())) {
      char buf[4096];
      ssize_t n;
      while ((n = read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
    }
  }
  close(fd);
  return out;
}
inline std::string http_get(int port, const std::string& path) { return http_request(port, "GET", path); }

// A CA and, signed by it, a server and a client certificate for localhost and
// 127.0.0.1 (dir/ca.pem, server.pem/.key, client.pem/.key); the client's
// subject and subjectAltName may be given. False on failure.
inline bool make_test_pki(const std::string& dir, const std::string& client_subject = "/CN=localhost",
                          const std::string& client_san = "DNS:localhost,IP:127.0.0.1") {
  auto ossl = [&](std::vector<std::string> args) {
    args.insert(args.begin(), "/usr/bin/openssl");
    return run_command(args, 60).code == 0;
  };
  if (!ossl({"req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", dir + "/ca.key", "-out", dir + "/ca.pem",
             "-days", "1", "-subj", "/CN=test-ca"}))
    return false;
  for (const std::string who : {"server", "client"}) {
    if (!ossl({"req", "-newkey", "rsa:2048", "-nodes", "-keyout", dir + "/" + who + ".key", "-out",
               dir + "/" + who + ".csr", "-subj", who == "client" ? client_subject : "/CN=localhost"}))
      return false;
    std::ofstream(dir + "/" + who + ".ext")
        << "subjectAltName=" << (who == "client" ? client_san : "DNS:localhost,IP:127.0.0.1") << "\n";
    if (!ossl({"x509", "-req", "-in", dir + "/" + who + ".csr", "-CA", dir + "/ca.pem", "-CAkey", dir + "/ca.key",
               "-CAcreateserial", "-out", dir + "/" + who + ".pem", "-days", "1", "-extfile",
               dir + "/" + who + ".ext"}))
      return false;
  }
  return true;
}

// A secret file (a token) as ptod accepts it: readable by its owner only.
inline void write_secret(const std::string& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) return;
  fchmod(fd, 0600);
  (void)!::write(fd, text.data(), text.size());
  ::close(fd);
}

class DaemonProcess {
 public:
  // Starts ptod with a private state dir and socket, no TCP listener unless
  // given, metrics on an ephemeral loopback port. Waits for its ready file.
  explicit DaemonProcess(std::vector<std::string> extra = {}, int chips = 1, int subs = 2,
                         std::vector<std::string> env = {})
      : env_(std::move(env)) {
    dir_ = make_temp_dir("ptod-test");
    socket_ = dir_ + "/ptod.sock";
    argv_ = {PTOD_PATH,
             "--state-dir",
             dir_ + "/state",
             "--socket",
             socket_,
             "--metrics",
             "127.0.0.1:0",
             "--ready-file",
             dir_ + "/ready",
             "--chips",
             std::to_string(chips),
             "--sub-workers",
             std::to_string(subs)};
    argv_.insert(argv_.end(), extra.begin(), extra.end());
    log_ = dir_ + "/ptod.log";
    launch();
  }
  // Starts it again after stop(): same state directory, socket and flags (a
  // host whose daemon came back).
  void restart() {
    stop(SIGKILL);
    info_.clear();
    std::error_code ec;
    std::filesystem::remove(dir_ + "/ready", ec);
    launch();
  }
  void launch() {
    const std::string ready = dir_ + "/ready";
    pid_ = fork();
    if (pid_ == 0) {
      const int fd = ::open(log_.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
      dup2(fd, 1);
      dup2(fd, 2);
      for (auto& e : env_) putenv(e.data());
      std::vector<char*> a;
      for (auto& s : argv_) a.push_back(s.data());
      a.push_back(nullptr);
      execv(a[0], a.data());
      _exit(127);
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < deadline) {
      int status;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        pid_ = -1;
        return;
      }
      std::ifstream f(ready);
      std::string line;
      while (std::getline(f, line)) {
        const auto eq = line.find('=');
        if (eq != std::string::npos) info_[line.substr(0, eq)] = line.substr(eq + 1);
      }
      if (info_.count("pid")) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  ~DaemonProcess() {
    stop(SIGKILL);
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  bool up() const { return pid_ > 0 && info_.count("pid"); }
  std::string address() const { return "unix:" + socket_; }
  int grpc_port() const { return info_.count("grpc_port") ? std::stoi(info_.at("grpc_port")) : 0; }
  int metrics_port() const { return info_.count("metrics_port") ? std::stoi(info_.at("metrics_port")) : 0; }
  int pid() const { return pid_; }
  // A sample of its metrics (name and labels as written); -1 if none.
  long metric(const std::string& sample) const {
    const std::string m = http_get(metrics_port(), "/metrics");
    const std::string key = "\n" + sample + " ";
    const size_t at = m.find(key);
    return at == std::string::npos ? -1 : std::atol(m.c_str() + at + key.size());
  }
  const std::string& dir() const { return dir_; }
  std::string log() const {
    std::ifstream f(log_);
    return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  }
  // Sends sig and waits (bounded) for the exit; returns the exit code.
  int stop(int sig = SIGTERM, int timeout_s = 60) {
    if (pid_ <= 0) return exit_code_;
    kill(pid_, sig);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
    int status = 0;
    for (;;) {
      if (waitpid(pid_, &status, WNOHANG) == pid_) break;
      if (std::chrono::steady_clock::now() > deadline) {
        kill(pid_, SIGKILL);
        waitpid(pid_, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    pid_ = -1;
    exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return exit_code_;
  }
  int exit_code() const { return exit_code_; }

 private:
  std::string dir_, socket_, log_;
  std::vector<std::string> argv_, env_;
  pid_t pid_ = -1;
  int exit_code_ = -1;
  std::map<std::string, std::string> info_;
};

}  // namespace pto_test
