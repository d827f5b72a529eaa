#include "metrics.h"

#include <asio.hpp>

#include "log.h"

namespace ptod {

struct MetricsServer::Impl {
  asio::io_context io;
  asio::ip::tcp::acceptor acceptor{io};
  Render render;

  void accept() {
    acceptor.async_accept([this](std::error_code ec, asio::ip::tcp::socket sock) {
      if (ec) return;  // closed
      auto s = std::make_shared<asio::ip::tcp::socket>(std::move(sock));
      auto buf = std::make_shared<asio::streambuf>(8192);  // a request longer than 8 KiB is refused
      // A client that connects and says nothing is dropped after 2 s.
      auto timer = std::make_shared<asio::steady_timer>(io, std::chrono::seconds(2));
      timer->async_wait([s](std::error_code e) {
        if (!e) {
          std::error_code ignore;
          s->close(ignore);
        }
      });
      asio::async_read_until(*s, *buf, "\r\n\r\n", [this, s, buf, timer](std::error_code ec2, size_t) {
        timer->cancel();
        std::string line;
        if (!ec2) {
          std::istream is(buf.get());
          std::getline(is, line);
        }
        std::string body, status = "200 OK", type = "text/plain; version=0.0.4";
        if (line.rfind("GET /metrics", 0) == 0) {
          body = render();
        } else {
          status = ec2 ? "400 Bad Request" : "404 Not Found";
          body = "GET /metrics\n";
          type = "text/plain";
        }
        auto out = std::make_shared<std::string>("HTTP/1.0 " + status + "\r\nContent-Type: " + type +
                                                 "\r\nContent-Length: " + std::to_string(body.size()) +
                                                 "\r\nConnection: close\r\n\r\n" + body);
        asio::async_write(*s, asio::buffer(*out), [s, out](std::error_code, size_t) {
          std::error_code ignore;
          s->shutdown(asio::ip::tcp::socket::shutdown_both, ignore);
        });
      });
      accept();
    });
  }
};

std::unique_ptr<MetricsServer> MetricsServer::start(const std::string& host, int port, Render render,
                                                    pto2::Status* error) {
  std::unique_ptr<MetricsServer> m(new MetricsServer());
  m->impl_ = std::make_unique<Impl>();
  m->impl_->render = std::move(render);
  try {
    asio::ip::tcp::resolver resolver(m->impl_->io);
    auto ep = *resolver.resolve(host, std::to_string(port)).begin();
    m->impl_->acceptor.open(ep.endpoint().protocol());
    m->impl_->acceptor.set_option(asio::ip::tcp::acceptor::reuse_address(true));
    m->impl_->acceptor.bind(ep.endpoint());
    m->impl_->acceptor.listen();
    m->port_ = m->impl_->acceptor.local_endpoint().port();
  } catch (const std::exception& e) {
    *error = pto2::Status::Error(pto2::kInvalidConfig,
                                 "[metrics] listen " + host + ":" + std::to_string(port) + ": " + e.what());
    return nullptr;
  }
  m->impl_->accept();
  m->thread_ = std::thread([impl = m->impl_.get()] { impl->io.run(); });
  return m;
}

MetricsServer::~MetricsServer() {
  if (impl_) {
    asio::post(impl_->io, [impl = impl_.get()] {
      std::error_code ec;
      impl->acceptor.close(ec);
      impl->io.stop();
    });
  }
  if (thread_.joinable()) thread_.join();
}

}  // namespace ptod
