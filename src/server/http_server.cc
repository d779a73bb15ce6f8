#include "server/http_server.h"

#include <httplib.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <random>
#include <utility>

#include "common/log.h"
#include "server/api_request.h"
#include "server/api_response.h"
#include "server/chat_page.h"
#include "server/generation_worker.h"
#include "server/harmony.h"
#include "server/host_policy.h"
#include "server/prompt.h"
#include "server/tool_calls.h"

namespace hypura::server {
namespace {

constexpr const char* kVersion = "0.1.0";
// The Ollama API version /api/version reports: clients gate features on it (VS Code's
// Copilot Chat refuses servers older than 0.6.4). The endpoints and fields of this one
// that Hypura serves are listed in docs/SERVER.md.
constexpr const char* kOllamaApiVersion = "0.9.0";
constexpr auto kPollInterval = std::chrono::milliseconds(100);  // client-gone checks
constexpr auto kShutdownGrace = std::chrono::seconds(5);        // for responses to finish

// The chat page needs nothing from elsewhere, and its policy says so: a slip in its Markdown
// rendering could then load nothing from, and send nothing to, another site (connect-src
// 'self': only this server's API), and no other site can frame it. img-src: the data: icon.
constexpr std::pair<const char*, const char*> kChatPageHeaders[] = {
    {"Content-Security-Policy",
     "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
     "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; "
     "frame-ancestors 'none'"},
    {"X-Content-Type-Options", "nosniff"},
    {"Referrer-Policy", "no-referrer"},
    {"Cache-Control", "no-cache"},  // a new binary's page replaces the old one at once
};

int64_t ns_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(b - a).count();
}

// What the access log line of the request on this HTTP thread says besides the status.
// Each request is served start to finish (body, content provider, logger) on one thread.
struct RequestLog {
  Clock::time_point start;
  std::string detail;
};
thread_local RequestLog t_log{Clock::now(), {}};  // reset after each request by the logger

bool is_openai_path(const std::string& path) {
  return path.rfind("/v1/", 0) == 0;
}

// The server's ConnectionLimits: enough connections for every request that can be in
// flight (queue + running) plus a few for listings and health checks.
ConnectionLimits connection_limits(const ServerOptions& o) {
  ConnectionLimits limits = o.connections;
  limits.max_connections =
      std::max(limits.max_connections, o.max_queue + static_cast<size_t>(o.parallel) + 8);
  return limits;
}

// One streaming or non-streaming generation response in progress.
struct Exchange {
  std::shared_ptr<Job> job;
  ResponseFormatter fmt;
  bool stream;
  int64_t n_prompt;
  bool started = false;
  std::string text;             // non-streaming: the pieces so far
  size_t dropped_messages = 0;  // oldest chat messages left out to fit the context
  // The reply's format needs parsing (harmony's channels, offered tools); null: plain text.
  std::unique_ptr<ReplyParser> parser{};
  bool show_thinking = true;      // Ollama "think": false leaves the reasoning out
  std::string thinking{};         // non-streaming: the reasoning so far
  std::vector<ToolCall> calls{};  // non-streaming: the calls so far
  size_t n_calls = 0;             // calls made so far
};

// The parser a reply needs: harmony's channels for a model that writes them (when its chat
// template made the prompt), Hermes tags when tools were offered; none otherwise.
std::unique_ptr<ReplyParser> reply_parser(const GenerationRequest& request, bool harmony) {
  if (harmony && uses_chat_template(request)) return std::make_unique<HarmonyParser>();
  if (!request.tools.empty()) return std::make_unique<ToolCallParser>(offered_tools(request.tools));
  return nullptr;
}

// What /api/show lists besides "completion".
ModelInfo with_capabilities(ModelInfo info, const runtime::Engine& engine) {
  info.capabilities = {"completion"};
  if (engine.supports_tools()) info.capabilities.push_back("tools");
  if (engine.fim_tokens()) info.capabilities.push_back("insert");
  return info;
}

}  // namespace

struct HttpServer::Impl {
  Impl(runtime::Engine& engine, ModelInfo info, ServerOptions options)
      : engine(engine),
        info(with_capabilities(std::move(info), engine)),
        options(std::move(options)),
        policy{this->options.host, this->options.allowed_hosts, this->options.allowed_origins},
        svr(connection_limits(this->options)),
        worker(engine, this->options.max_queue, this->options.parallel),
        seeds(std::random_device{}()) {}

  void setup();
  void setup_hooks();
  bool pre_route(const httplib::Request& req, httplib::Response& res);
  bool refuse_foreign(const httplib::Request& req, httplib::Response& res);
  void setup_routes();
  void handle_pull(const httplib::Request& req, httplib::Response& res);
  bool model_matches(const std::string& requested) const;
  void reply_error(httplib::Response& res, Api api, int status, const std::string& message);
  void handle_generation(Api api, const httplib::Request& req, httplib::Response& res);
  void respond_now(const GenerationRequest& request, const ResponseFormatter& fmt, int64_t n_prompt,
                   httplib::Response& res);
  void handle_embed(Api api, const httplib::Request& req, httplib::Response& res);
  Result<std::vector<std::vector<int32_t>>> embed_inputs(const EmbedRequest& request,
                                                         int64_t n_ctx);
  void unload_now(Api api, const httplib::Request& req, const ResponseFormatter& fmt,
                  httplib::Response& res);
  void start_exchange(std::shared_ptr<Exchange> ex, httplib::Response& res);
  bool pump(Exchange& ex, httplib::DataSink& sink);
  bool forward(Exchange& ex, httplib::DataSink& sink, ReplyPieces pieces);
  bool finish_exchange(Exchange& ex, httplib::DataSink& sink);
  uint64_t fresh_seed();

  runtime::Engine& engine;
  const ModelInfo info;
  const ServerOptions options;
  const HostPolicy policy;
  GuardedServer svr;
  GenerationWorker worker;
  int port = 0;
  std::atomic<bool> stopping{false};
  std::atomic<uint64_t> next_id{1};
  std::mutex seed_mu;
  std::mt19937_64 seeds;  // guarded by seed_mu
  std::mutex active_mu;
  std::condition_variable active_cv;
  int active = 0;  // generation responses still writing; guarded by active_mu
};

HttpServer::HttpServer(runtime::Engine& engine, ModelInfo info, ServerOptions options)
    : impl_(std::make_unique<Impl>(engine, std::move(info), std::move(options))) {
  impl_->setup();
}

HttpServer::~HttpServer() {
  shutdown();
}

Status HttpServer::bind() {
  Impl& s = *impl_;
  if (s.options.port == 0) {
    s.port = s.svr.bind_to_any_port(s.options.host);
    if (s.port <= 0) return io_error("cannot bind " + s.options.host + " to any port");
  } else {
    if (!s.svr.bind_to_port(s.options.host, s.options.port)) {
      return io_error("cannot listen on " + s.options.host + ":" + std::to_string(s.options.port) +
                      " (in use, or not a local address)");
    }
    s.port = s.options.port;
  }
  if (!s.svr.raise_listen_backlog()) return io_error("cannot listen on " + s.options.host);
  return Status::ok();
}

int HttpServer::port() const {
  return impl_->port;
}

size_t HttpServer::busy_connections() const {
  return impl_->svr.busy_connections();
}

void HttpServer::run() {
  impl_->svr.listen_after_bind();
}

void HttpServer::shutdown() {
  Impl& s = *impl_;
  if (s.stopping.exchange(true)) return;
  // Cancel first so that every open response ends with an error line, then stop the
  // listener (which also ends the content providers' write loops).
  s.worker.shutdown();
  {
    std::unique_lock lock(s.active_mu);
    s.active_cv.wait_for(lock, kShutdownGrace, [&] { return s.active == 0; });
  }
  s.svr.stop();
}

void HttpServer::Impl::setup() {
  svr.set_payload_max_length(options.max_body_bytes);
  setup_hooks();
  setup_routes();
}

void HttpServer::Impl::setup_hooks() {
  svr.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    t_log = RequestLog{Clock::now(), {}};
    return pre_route(req, res) ? httplib::Server::HandlerResponse::Handled
                               : httplib::Server::HandlerResponse::Unhandled;
  });
  // Errors that httplib produces itself (unknown path, oversized body, malformed HTTP)
  // get JSON bodies too; an oversized body is a bad request like any other (400).
  svr.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    const Api dialect = is_openai_path(req.path) ? Api::kOpenAiChat : Api::kOllamaChat;
    std::string message = "HTTP error " + std::to_string(res.status);
    if (GuardedServer::request_fault() == RequestFault::kHeadersTooLarge) {
      res.status = 431;
      message = "request headers are larger than " +
                std::to_string(options.connections.max_header_bytes) + " bytes or " +
                std::to_string(options.connections.max_header_count) + " lines";
    } else if (GuardedServer::request_fault() == RequestFault::kTimeout) {
      res.status = 408;
      message = "request not received in time";
      res.set_header("Connection", "close");
    } else if (res.status == 413) {
      res.status = 400;
      message = "request body is larger than " + std::to_string(options.max_body_bytes) +
                " bytes (--max-body)";
    } else if (res.status == 404) {
      message = "404 page not found";
    }
    res.set_content(error_body(dialect, res.status, message), "application/json");
  });
  svr.set_exception_handler(
      [](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "internal error";
        try {
          std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        spdlog::error("{} {}: {}", req.method, log_escape(req.path), log_escape(what));
        res.status = 500;
        res.set_content(ollama_error(what), "application/json");
      });
  svr.set_logger([](const httplib::Request& req, const httplib::Response& res) {
    double ms = std::chrono::duration<double, std::milli>(Clock::now() - t_log.start).count();
    spdlog::info("{} \"{} {}\" {} {:.1f}ms{}{}", req.remote_addr, log_escape(req.method),
                 log_escape(req.path), res.status, ms, t_log.detail.empty() ? "" : " ",
                 log_escape(t_log.detail));
    // Requests httplib rejects before routing (malformed HTTP) skip the pre-routing hook:
    // start them clean.
    t_log = RequestLog{Clock::now(), {}};
  });
}

// Runs on every request after its headers, before its body is read. True: answered.
bool HttpServer::Impl::pre_route(const httplib::Request& req, httplib::Response& res) {
  if (refuse_foreign(req, res)) return true;
  const std::string origin = req.get_header_value("Origin");
  const bool preflight = req.method == "OPTIONS";
  for (auto& [name, value] :
       cors_headers(origin, preflight, req.get_header_value("Access-Control-Request-Headers"))) {
    res.set_header(name.c_str(), value);
  }
  if (preflight) {
    res.status = 204;
    return true;
  }
  // `curl -d` sends application/x-www-form-urlencoded, and httplib parses such a body as
  // a form, refusing it past 8 KiB (as a 413). Every body here is JSON whatever its type
  // says (Ollama reads them so too), so the type is rewritten before the body is read; the
  // Request is httplib's own mutable object, handed to this hook as const.
  auto& headers = const_cast<httplib::Request&>(req).headers;
  auto [first, last] = headers.equal_range("Content-Type");  // names compare ignoring case
  for (auto it = first; it != last; ++it) {
    if (it->second.starts_with("application/x-www-form-urlencoded"))
      it->second = "application/json";
  }
  return false;
}

// 403 for a Host other than ours (DNS rebinding) or a browser Origin we do not trust
// (cross-site requests), before the body is read. host_policy.h has the rules.
bool HttpServer::Impl::refuse_foreign(const httplib::Request& req, httplib::Response& res) {
  const Api dialect = is_openai_path(req.path) ? Api::kOpenAiChat : Api::kOllamaChat;
  if (!host_allowed(policy, req.get_header_value("Host"))) {
    reply_error(res, dialect, 403,
                "Host \"" + req.get_header_value("Host") +
                    "\" is not allowed (hypura serve --allow-host NAME)");
    return true;
  }
  if (!origin_allowed(policy, req.get_header_value("Origin"), req.get_header_value("Host"))) {
    reply_error(res, dialect, 403,
                "Origin \"" + req.get_header_value("Origin") +
                    "\" is not allowed (hypura serve --allow-origin ORIGIN)");
    return true;
  }
  return false;
}

void HttpServer::Impl::setup_routes() {
  using httplib::Request;
  using httplib::Response;
  // Browsers (their Accept names text/html) get the chat page; Ollama clients and health
  // checks get the plain answer they look for.
  svr.Get("/", [](const Request& req, Response& res) {
    if (req.get_header_value("Accept").find("text/html") == std::string::npos) {
      res.set_content("Hypura is running", "text/plain; charset=utf-8");
      return;
    }
    for (const auto& [name, value] : kChatPageHeaders) res.set_header(name, value);
    res.set_content(kChatPage, sizeof(kChatPage) - 1, "text/html; charset=utf-8");
  });
  svr.Get("/api/version", [](const Request&, Response& res) {
    res.set_content(version_body(kOllamaApiVersion, kVersion), "application/json");
  });
  svr.Get("/api/tags", [this](const Request&, Response& res) {
    Result<store::ModelStore> models = store::ModelStore::open(options.models_dir);
    Result<std::vector<store::StoredModel>> pulled =
        models.is_ok() ? models->list() : Result<std::vector<store::StoredModel>>(models.status());
    res.set_content(tags_body(info, pulled.is_ok() ? *pulled : std::vector<store::StoredModel>{}),
                    "application/json");
  });
  svr.Post("/api/pull", [this](const Request& req, Response& res) { handle_pull(req, res); });
  svr.Delete("/api/delete", [this](const Request& req, Response& res) {
    Result<std::string> model = parse_show_request(req.body);
    if (!model.is_ok()) return reply_error(res, Api::kOllamaChat, 400, model.status().message());
    Result<store::ModelStore> models = store::ModelStore::open(options.models_dir);
    const Status st = models.is_ok() ? models->remove(*model) : models.status();
    if (st.code() == StatusCode::kNotFound) {
      return reply_error(res, Api::kOllamaChat, 404, "model \"" + *model + "\" not found");
    }
    if (!st.is_ok()) return reply_error(res, Api::kOllamaChat, 500, st.message());
  });
  svr.Get("/api/ps", [this](const Request&, Response& res) {
    res.set_content(ps_body(info, worker.context()), "application/json");
  });
  svr.Post("/api/show", [this](const Request& req, Response& res) {
    Result<std::string> model = parse_show_request(req.body);
    if (!model.is_ok()) return reply_error(res, Api::kOllamaChat, 400, model.status().message());
    if (!model_matches(*model)) {
      return reply_error(res, Api::kOllamaChat, 404, "model \"" + *model + "\" not found");
    }
    res.set_content(show_body(info, worker.context()), "application/json");
  });
  svr.Get("/v1/models", [this](const Request&, Response& res) {
    res.set_content(openai_models_body(info), "application/json");
  });
  svr.Get(R"(/v1/models/(.+))", [this](const Request& req, Response& res) {
    const std::string id = req.matches[1];
    if (!model_matches(id)) {
      return reply_error(res, Api::kOpenAiChat, 404, "The model '" + id + "' does not exist");
    }
    res.set_content(openai_model_body(info), "application/json");
  });
  const std::pair<const char*, Api> generation_routes[] = {
      {"/api/generate", Api::kOllamaGenerate},
      {"/api/chat", Api::kOllamaChat},
      {"/v1/chat/completions", Api::kOpenAiChat},
      {"/v1/completions", Api::kOpenAiCompletion},
  };
  for (const auto& [path, api] : generation_routes) {
    svr.Post(path, [this, api = api](const Request& req, Response& res) {
      handle_generation(api, req, res);
    });
  }
  const std::pair<const char*, Api> embed_routes[] = {
      {"/api/embed", Api::kOllamaEmbed},
      {"/api/embeddings", Api::kOllamaEmbeddings},
      {"/v1/embeddings", Api::kOpenAiEmbeddings},
  };
  for (const auto& [path, api] : embed_routes) {
    svr.Post(path,
             [this, api = api](const Request& req, Response& res) { handle_embed(api, req, res); });
  }
}

// POST /api/pull: the download runs on this connection's thread. Streamed: an NDJSON line
// per event (progress at most every 1% or 0.5 s), an {"error"} line if it fails, and a
// client that goes away cancels it (the part stays, a later pull resumes). Not streamed:
// {"status": "success"} or the error with its HTTP status.
void HttpServer::Impl::handle_pull(const httplib::Request& req, httplib::Response& res) {
  Result<PullRequest> pr = parse_pull_request(req.body);
  if (!pr.is_ok()) return reply_error(res, Api::kOllamaChat, 400, pr.status().message());
  Result<store::ModelStore> models = store::ModelStore::open(options.models_dir);
  if (!models.is_ok()) return reply_error(res, Api::kOllamaChat, 500, models.status().message());
  const auto status_of = [](const Status& st) {
    switch (st.code()) {
      case StatusCode::kInvalidArgument:
        return 400;
      case StatusCode::kNotFound:
        return 404;
      default:
        return 500;
    }
  };
  store::PullOptions o;
  o.endpoint = options.hf_endpoint;
  if (const char* token = std::getenv("HF_TOKEN")) o.http.token = token;
  if (!pr->stream) {
    Result<store::StoredModel> m = models->pull(pr->model, o, nullptr);
    if (!m.is_ok())
      return reply_error(res, Api::kOllamaChat, status_of(m.status()), m.status().message());
    res.set_content(pull_event_line({"success", "", "", 0, 0, 0, 0}), "application/json");
    return;
  }
  auto store = std::make_shared<store::ModelStore>(*std::move(models));
  res.set_chunked_content_provider(
      "application/x-ndjson", [store, o, model = pr->model](size_t, httplib::DataSink& sink) {
        std::atomic<bool> gone{false};
        store::PullOptions opts = o;
        opts.http.cancel = &gone;
        auto last = std::chrono::steady_clock::now();
        uint64_t last_completed = 0;
        const auto send = [&](const store::PullEvent& e) {
          if (gone) return;
          const auto now = std::chrono::steady_clock::now();
          const bool progress = !e.file.empty() && e.completed > 0 && e.completed < e.total;
          if (progress && now - last < std::chrono::milliseconds(500) &&
              e.completed - last_completed < e.total / 100)
            return;
          last = now;
          last_completed = e.completed;
          const std::string line = pull_event_line(e);
          if (!sink.write(line.data(), line.size())) gone = true;
        };
        Result<store::StoredModel> m = store->pull(model, opts, send);
        if (!m.is_ok() && !gone) {
          const std::string line = error_body(Api::kOllamaChat, 500, m.status().message()) + "\n";
          sink.write(line.data(), line.size());
        }
        sink.done();
        return true;
      });
}

bool HttpServer::Impl::model_matches(const std::string& requested) const {
  return normalize_model_name(requested) == normalize_model_name(info.name);
}

void HttpServer::Impl::reply_error(httplib::Response& res, Api api, int status,
                                   const std::string& message) {
  res.status = status;
  res.set_content(error_body(api, status, message), "application/json");
  t_log.detail = message;
}

uint64_t HttpServer::Impl::fresh_seed() {
  std::lock_guard lock(seed_mu);
  return seeds();
}

void HttpServer::Impl::handle_generation(Api api, const httplib::Request& req,
                                         httplib::Response& res) {
  RequestLimits limits;
  Result<GenerationRequest> parsed = parse_generation_request(api, req.body, limits);
  if (!parsed.is_ok()) return reply_error(res, api, 400, parsed.status().message());
  const GenerationRequest& request = *parsed;
  if (!model_matches(request.model)) {
    return reply_error(res, api, 404,
                       "model \"" + request.model + "\" not found, try pulling it first");
  }
  const uint64_t id = next_id.fetch_add(1);
  ResponseFormatter fmt(
      api, request.model, request.include_usage,
      std::string(api == Api::kOpenAiChat ? "chatcmpl-" : "cmpl-") + std::to_string(id),
      now_unix_seconds());
  const bool load_only =
      (api == Api::kOllamaChat && request.messages.empty()) ||
      (api == Api::kOllamaGenerate && request.prompt.empty() && request.system.empty());
  if (load_only) {  // Ollama clients "load" (or with keep_alive 0 unload) with an empty request
    if (request.unload) return unload_now(api, req, fmt, res);
    res.set_content(fmt.load_response(), "application/json");
    return;
  }
  bool too_long = false;
  Result<PreparedPrompt> prompt = prepare_prompt(engine, request, &too_long);
  if (!prompt.is_ok()) {
    res.status = 400;
    res.set_content(
        error_body(api, 400, prompt.status().message(), too_long ? "context_length_exceeded" : ""),
        "application/json");
    t_log.detail = prompt.status().message();
    return;
  }
  const int64_t n_prompt = static_cast<int64_t>(prompt->tokens.size());
  Result<runtime::GenerateOptions> gen =
      generate_options(request, n_prompt, prompt->n_ctx, fresh_seed());
  if (!gen.is_ok()) return reply_error(res, api, 400, gen.status().message());
  gen->speculation = options.speculation;
  if (gen->max_tokens == 0) return respond_now(request, fmt, n_prompt, res);

  auto job =
      std::make_shared<Job>(req.remote_addr, std::move(prompt->tokens), std::move(gen).value());
  job->set_context(prompt->n_ctx);
  job->set_unload(request.unload);
  Status submitted = worker.submit(job);
  if (!submitted.is_ok()) return reply_error(res, api, 503, submitted.message());
  auto ex = std::make_shared<Exchange>(
      Exchange{job, std::move(fmt), request.stream, n_prompt, false, {}});
  ex->dropped_messages = prompt->dropped_messages;
  ex->parser = reply_parser(request, engine.writes_harmony());
  ex->show_thinking = request.show_thinking;
  start_exchange(std::move(ex), res);
}

// Token ids of each input, cut to n_ctx when request.truncate (else a 400).
Result<std::vector<std::vector<int32_t>>> HttpServer::Impl::embed_inputs(
    const EmbedRequest& request, int64_t n_ctx) {
  std::vector<std::vector<int32_t>> inputs = request.token_inputs;
  for (const std::string& text : request.texts) inputs.push_back(engine.tokenize(text, true));
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::vector<int32_t>& t = inputs[i];
    if (t.empty()) return invalid_argument("\"input\"[" + std::to_string(i) + "] is empty");
    for (int32_t id : t) {
      if (id >= engine.n_vocab()) {
        return invalid_argument("\"input\"[" + std::to_string(i) + "]: token id " +
                                std::to_string(id) + " is not in the vocabulary");
      }
    }
    if (static_cast<int64_t>(t.size()) <= n_ctx) continue;
    if (!request.truncate || request.api == Api::kOpenAiEmbeddings) {
      return invalid_argument(
          "\"input\"[" + std::to_string(i) + "] is " + std::to_string(t.size()) +
          " tokens but the context window holds " + std::to_string(n_ctx) +
          (request.api == Api::kOllamaEmbed ? " (truncate: true cuts it)" : ""));
    }
    t.resize(static_cast<size_t>(n_ctx));
  }
  return inputs;
}

void HttpServer::Impl::handle_embed(Api api, const httplib::Request& req, httplib::Response& res) {
  Result<EmbedRequest> parsed = parse_embed_request(api, req.body);
  if (!parsed.is_ok()) return reply_error(res, api, 400, parsed.status().message());
  const EmbedRequest& request = *parsed;
  if (!model_matches(request.model)) {
    return reply_error(res, api, 404,
                       "model \"" + request.model + "\" not found, try pulling it first");
  }
  const int64_t n_ctx =
      request.num_ctx > 0 ? std::min(request.num_ctx, engine.max_context()) : engine.n_ctx();
  Result<std::vector<std::vector<int32_t>>> inputs = embed_inputs(request, n_ctx);
  if (!inputs.is_ok()) return reply_error(res, api, 400, inputs.status().message());
  int64_t n_tokens = 0;
  for (const auto& t : *inputs) n_tokens += static_cast<int64_t>(t.size());
  std::vector<std::vector<float>> embeddings;
  if (!inputs->empty()) {
    auto job =
        std::make_shared<Job>(req.remote_addr, std::vector<int32_t>{}, runtime::GenerateOptions{});
    job->set_embed(std::move(inputs).value(), engine.pooling());
    job->set_context(n_ctx);
    job->set_unload(request.unload);
    if (Status st = worker.submit(job); !st.is_ok())
      return reply_error(res, api, 503, st.message());
    while (!job->wait(kPollInterval).done) {
    }
    const Result<runtime::GenerateResult>& result = job->result();
    if (!result.is_ok()) return reply_error(res, api, 500, result.status().message());
    if (result->done_reason == "cancelled") return reply_error(res, api, 503, job->cancel_reason());
    embeddings = job->take_embeddings();
    t_log.detail = fmt::format("embed inputs={} tokens={}", embeddings.size(), n_tokens);
    res.set_content(
        embed_body(request, std::move(embeddings), n_tokens, ns_between(t_log.start, Clock::now()),
                   ns_between(t_log.start, job->started())),
        "application/json");
    return;
  }
  res.set_content(embed_body(request, {}, 0, ns_between(t_log.start, Clock::now()), 0),
                  "application/json");
}

// keep_alive 0 with nothing to generate: unload in queue order, then answer.
void HttpServer::Impl::unload_now(Api api, const httplib::Request& req,
                                  const ResponseFormatter& fmt, httplib::Response& res) {
  auto job =
      std::make_shared<Job>(req.remote_addr, std::vector<int32_t>{}, runtime::GenerateOptions{});
  if (Status st = worker.submit(job); !st.is_ok()) return reply_error(res, api, 503, st.message());
  while (!job->wait(kPollInterval).done) {
  }
  if (job->cancelled()) return reply_error(res, api, 503, job->cancel_reason());
  res.set_content(fmt.load_response("unload"), "application/json");
}

// num_predict 0: nothing to generate, so nothing to queue.
void HttpServer::Impl::respond_now(const GenerationRequest& request, const ResponseFormatter& fmt,
                                   int64_t n_prompt, httplib::Response& res) {
  Outcome outcome;
  outcome.result.done_reason = "length";
  outcome.n_prompt = n_prompt;
  outcome.total_ns = ns_between(t_log.start, Clock::now());
  if (request.stream) {
    res.set_content(fmt.stream_start() + fmt.stream_end(outcome), fmt.content_type(true));
  } else {
    res.set_content(fmt.full("", outcome), fmt.content_type(false));
  }
}

void HttpServer::Impl::start_exchange(std::shared_ptr<Exchange> ex, httplib::Response& res) {
  {
    std::lock_guard lock(active_mu);
    ++active;
  }
  const char* content_type = ex->fmt.content_type(ex->stream);
  res.set_chunked_content_provider(
      content_type, [this, ex](size_t, httplib::DataSink& sink) { return pump(*ex, sink); },
      [this, ex](bool) {
        // Runs however the response ended; a job still running has lost its client.
        ex->job->cancel("client disconnected");
        {
          std::lock_guard lock(active_mu);
          --active;
        }
        active_cv.notify_all();
      });
}

// Moves what the job produced since the last call to the client. Returns false to abort
// the response (the client is gone).
bool HttpServer::Impl::pump(Exchange& ex, httplib::DataSink& sink) {
  auto write = [&](const std::string& s) { return s.empty() || sink.write(s.data(), s.size()); };
  if (!ex.started) {
    ex.started = true;
    if (ex.stream && !write(ex.fmt.stream_start())) return false;
  }
  Job::Update update = ex.job->wait(kPollInterval);
  for (std::string& piece : update.pieces) {
    ReplyPieces out = ex.parser ? ex.parser->push(piece) : ReplyPieces{std::move(piece), {}, {}};
    if (!forward(ex, sink, std::move(out))) return false;  // the releaser cancels the job
  }
  if (update.done) return finish_exchange(ex, sink);
  // A stream notices a departed client when a write fails; a non-streamed answer writes
  // nothing until the end, so it asks the socket (a poll and a peek) on every wake-up.
  if ((!ex.stream || update.pieces.empty()) && !sink.is_writable()) return false;
  return true;
}

// Reasoning, text and tool calls of the reply to the client (streaming) or to the final
// body.
bool HttpServer::Impl::forward(Exchange& ex, httplib::DataSink& sink, ReplyPieces pieces) {
  const size_t first = ex.n_calls;
  ex.n_calls += pieces.calls.size();
  if (!ex.show_thinking) pieces.thinking.clear();
  if (!ex.stream) {
    ex.thinking += pieces.thinking;
    ex.text += pieces.text;
    for (ToolCall& c : pieces.calls) ex.calls.push_back(std::move(c));
    return true;
  }
  for (const std::string& s :
       {ex.fmt.stream_thinking(pieces.thinking),
        pieces.text.empty() ? std::string() : ex.fmt.stream_piece(pieces.text),
        ex.fmt.stream_tool_calls(pieces.calls, first)}) {
    if (!s.empty() && !sink.write(s.data(), s.size())) return false;
  }
  return true;
}

bool HttpServer::Impl::finish_exchange(Exchange& ex, httplib::DataSink& sink) {
  if (ex.parser) {
    if (!forward(ex, sink, ex.parser->finish())) return false;
    // A reply that calls tools has no content besides the whitespace around its calls.
    if (ex.n_calls > 0 && ex.text.find_first_not_of(" \t\r\n") == std::string::npos)
      ex.text.clear();
  }
  const Job& job = *ex.job;
  const Result<runtime::GenerateResult>& result = job.result();
  std::string body;
  if (!result.is_ok() || result->done_reason == "cancelled") {
    std::string message = result.is_ok() ? job.cancel_reason() : result.status().message();
    body = ex.stream ? ex.fmt.stream_error(message) : ollama_error(message);
    t_log.detail = "failed: " + message;
  } else {
    Outcome outcome{*result, ex.n_prompt, ns_between(t_log.start, job.finished()),
                    ns_between(t_log.start, job.started())};
    body = ex.stream ? ex.fmt.stream_end(outcome, ex.n_calls > 0)
                     : ex.fmt.full(ex.text, outcome, ex.calls, ex.thinking);
    const double tok_s =
        result->generate_seconds > 0 ? result->generated_tokens / result->generate_seconds : 0;
    t_log.detail = fmt::format("prompt={} (reused {}) eval={} {:.1f} tok/s done={} ctx={}",
                               ex.n_prompt, result->prompt_tokens_reused, result->generated_tokens,
                               tok_s, result->done_reason, job.context());
    if (ex.dropped_messages > 0)
      t_log.detail += fmt::format(" dropped={} messages", ex.dropped_messages);
    if (result->grammar_seconds > 0 && result->generated_tokens > 0) {
      t_log.detail += fmt::format(" mask={:.2f}ms/token",
                                  1e3 * result->grammar_seconds / result->generated_tokens);
    }
    if (result->spec.drafted > 0) {  // --lookup / --draft: guesses kept of those verified
      t_log.detail += fmt::format(" spec={}/{} in {} passes", result->spec.accepted,
                                  result->spec.drafted, result->spec.passes);
    }
  }
  if (!sink.write(body.data(), body.size())) return false;
  sink.done();
  return true;
}

}  // namespace hypura::server
