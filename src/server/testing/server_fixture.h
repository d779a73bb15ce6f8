// ServerTest: a GoogleTest fixture that runs an HttpServer over the fake engine on a free
// loopback port, with an httplib client for it. Shared by the server's HTTP tests.
#pragma once

#include <gtest/gtest.h>
#include <httplib.h>

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "server/http_server.h"
#include "server/testing/fake_engine.h"

namespace hypura::server::testing {

class ServerTest : public ::testing::Test {
 protected:
  void start(FakeConfig config = {}, ServerOptions options = {}) {
    engine_ = std::make_unique<FakeEngine>(config);
    ModelInfo info;
    info.name = "fake:latest";
    info.family = "fake";
    info.context_length = config.n_ctx;
    info.model_info = {{"general.architecture", "fake"}};
    options.port = 0;
    server_ = std::make_unique<HttpServer>(*engine_, info, options);
    ASSERT_TRUE(server_->bind().is_ok());
    thread_ = std::thread([this] { server_->run(); });
    for (int i = 0; i < 200 && !client().Get("/"); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  void TearDown() override {
    if (server_) server_->shutdown();
    if (thread_.joinable()) thread_.join();
  }
  httplib::Client client() {
    httplib::Client c("127.0.0.1", server_->port());
    c.set_read_timeout(10, 0);
    return c;
  }
  // POSTs with a callback that sees the body as it arrives; returning false hangs up.
  httplib::Result post_streaming(const std::string& path, const nlohmann::json& body,
                                 std::function<bool(const char*, size_t)> on_data) {
    httplib::Request req;
    req.method = "POST";
    req.path = path;
    req.body = body.dump();
    req.set_header("Content-Type", "application/json");
    req.content_receiver = [on_data](const char* data, size_t n, uint64_t, uint64_t) {
      return on_data(data, n);
    };
    return client().send(req);
  }
  httplib::Result post(const std::string& path, const nlohmann::json& body) {
    return client().Post(path.c_str(), body.dump(), "application/json");
  }

  // Waits until done() holds: the tests' gates make it happen; the bound only ends a broken
  // run instead of hanging it.
  static bool eventually(const std::function<bool()>& done) {
    for (int i = 0; i < 30000 && !done(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return done();
  }

  std::unique_ptr<FakeEngine> engine_;
  std::unique_ptr<HttpServer> server_;
  std::thread thread_;
};

}  // namespace hypura::server::testing
