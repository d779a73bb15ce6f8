// `hypura run [MODEL] --prompt TEXT | --interactive`: generate text with a model.
//
// Streams the reply to stdout as it is generated; load time, prompt and generation speed
// go to stderr (with a progress bar while the weights load, when stderr is a terminal).
// The prompt is wrapped in the model's chat template unless --no-chat. --interactive is
// a chat REPL: the conversation (and the KV cache, so earlier turns are not processed
// again) is kept between turns, Ctrl-C stops the current reply, /exit or end of input
// quits.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>

#include "cli/command.h"
#include "runtime/session.h"
#include "server/harmony.h"
#include "tokenizer/tokenizer.h"

namespace hypura::cli {
namespace {

struct RunArgs {
  std::string model;
  std::string prompt;
  std::string system;
  std::string reasoning_effort;  // templates that take one (gpt-oss's); "": their default
  int max_tokens = 256;
  float temperature = 0.8f;
  int top_k = 40;
  float top_p = 0.95f;
  float min_p = 0.05f;
  float repeat_penalty = 1.1f;
  int64_t seed = -1;
  int64_t context = 4096;
  std::string trace;  // expert-streaming routing trace file
  EngineFlags engine;
  SpecFlags spec;
  std::vector<std::string> stop;
  bool no_chat = false;
  bool interactive = false;
  bool show_tokens = false;
  bool json = false;  // one JSON object on stdout at the end instead of the streamed text
};

std::atomic<bool> g_cancel{false};
std::atomic<bool> g_generating{false};

// Ctrl-C while a reply is generated stops that reply; otherwise it quits.
void on_sigint(int) {
  if (g_generating.load()) {
    g_cancel.store(true);
  } else {
    std::_Exit(130);
  }
}

void draw_progress(uint64_t done, uint64_t total) {
  static int last = -1;
  const int pct = total ? static_cast<int>(done * 100 / total) : 100;
  if (pct == last) return;
  last = pct;
  const int width = 40, filled = pct * width / 100;
  std::fprintf(stderr, "\rloading [%.*s%*s] %3d%% (%.0f / %.0f MiB)", filled,
               "########################################", width - filled, "", pct,
               done / 1048576.0, total / 1048576.0);
  if (done >= total) std::fprintf(stderr, "\n");
  std::fflush(stderr);
}

double per_second(double n, double seconds) {
  return seconds > 0 ? n / seconds : 0;
}

void print_stats(const runtime::GenerateResult& r) {
  std::fprintf(stderr,
               "\nprompt: %d tokens (%d cached), %.1f tok/s | generation: %d tokens, "
               "%.1f tok/s | %s\n",
               r.prompt_tokens, r.prompt_tokens_reused,
               per_second(r.prompt_tokens, r.prompt_seconds), r.generated_tokens,
               per_second(r.generated_tokens, r.generate_seconds), r.done_reason.c_str());
  const runtime::SpecStats& s = r.spec;
  if (s.drafted == 0) return;
  std::fprintf(stderr,
               "speculation: %lld guesses, %lld kept (%.0f%%), %lld passes, %.2f tokens a pass\n",
               static_cast<long long>(s.drafted), static_cast<long long>(s.accepted),
               100.0 * s.accepted / s.drafted, static_cast<long long>(s.passes),
               per_second(r.generated_tokens, static_cast<double>(s.passes)));
  if (s.side_drafted > 0) {
    std::fprintf(stderr, "draft trees: %lld guesses off the main branch, %lld kept\n",
                 static_cast<long long>(s.side_drafted), static_cast<long long>(s.side_accepted));
  }
}

// --json: the reply and its figures as one object.
nlohmann::json result_json(const runtime::GenerateResult& r) {
  const runtime::SpecStats& s = r.spec;
  return {{"text", r.text},
          {"done_reason", r.done_reason},
          {"prompt_tokens", r.prompt_tokens},
          {"prompt_tokens_cached", r.prompt_tokens_reused},
          {"prompt_tok_per_s", per_second(r.prompt_tokens, r.prompt_seconds)},
          {"generated_tokens", r.generated_tokens},
          {"tok_per_s", per_second(r.generated_tokens, r.generate_seconds)},
          {"spec",
           {{"drafted", s.drafted},
            {"accepted", s.accepted},
            {"side_drafted", s.side_drafted},
            {"side_accepted", s.side_accepted},
            {"target_passes", s.passes},
            {"tokens_per_pass", per_second(r.generated_tokens, static_cast<double>(s.passes))}}}};
}

runtime::GenerateOptions generate_options(const RunArgs& a) {
  runtime::GenerateOptions o;
  o.max_tokens = a.max_tokens;
  o.stop = a.stop;
  o.cancel = &g_cancel;
  auto& s = o.sampling;
  s.temperature = a.temperature;
  s.top_k = a.top_k;
  s.top_p = a.top_p;
  s.min_p = a.min_p;
  s.repeat_penalty = a.repeat_penalty;
  s.seed = a.seed >= 0 ? static_cast<uint64_t>(a.seed) : std::random_device{}();
  o.speculation = speculation_options(a.spec);
  return o;
}

// Prints a parsed piece of a harmony reply: the answer to stdout, reasoning and calls to
// stderr (so stdout holds only the answer); returns the answer's text.
std::string print_pieces(const server::ReplyPieces& p) {
  std::fwrite(p.thinking.data(), 1, p.thinking.size(), stderr);
  for (const server::ToolCall& c : p.calls)
    std::fprintf(stderr, "\n[tool call] %s %s\n", c.name.c_str(), c.arguments.dump().c_str());
  std::fwrite(p.text.data(), 1, p.text.size(), stdout);
  std::fflush(stdout);
  return p.text;
}

// Generates one reply to `prompt` tokens, streaming it to stdout; *answer gets the reply
// as a chat history keeps it. A harmony reply (gpt-oss, with its chat template) is split:
// its reasoning goes to stderr, its final answer to stdout and *answer.
Result<runtime::GenerateResult> reply(runtime::Engine& engine, const RunArgs& a,
                                      runtime::Session& session, const std::vector<int32_t>& prompt,
                                      const runtime::GenerateOptions& options,
                                      std::string* answer) {
  std::optional<server::HarmonyParser> harmony;
  if (engine.writes_harmony() && !a.no_chat && !a.json) harmony.emplace();
  answer->clear();
  g_cancel.store(false);
  g_generating.store(true);
  auto result = session.generate(prompt, options, [&](std::string_view piece) {
    if (harmony) {
      *answer += print_pieces(harmony->push(piece));
      return true;
    }
    *answer += piece;
    if (a.json) return true;
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::fflush(stdout);
    return true;
  });
  if (harmony) *answer += print_pieces(harmony->finish());
  g_generating.store(false);
  return result;
}

Result<std::vector<int32_t>> tokenize_turn(runtime::Engine& engine, const RunArgs& a,
                                           const std::vector<runtime::ChatMessage>& chat,
                                           const std::string& raw) {
  if (a.no_chat) return engine.tokenize(raw, /*add_special=*/true);
  runtime::ChatOptions options;
  options.reasoning_effort = a.reasoning_effort;
  return engine.tokenize_chat(chat, options);
}

int run_once(runtime::Engine& engine, const RunArgs& a) {
  std::vector<runtime::ChatMessage> chat;
  if (!a.system.empty()) chat.push_back({"system", a.system});
  chat.push_back({"user", a.prompt});
  auto prompt = tokenize_turn(engine, a, chat, a.prompt);
  if (!prompt.is_ok()) {
    std::cerr << "hypura run: " << prompt.status().message() << "\n";
    return 1;
  }
  if (a.show_tokens) {
    std::fprintf(stderr, "prompt tokens:");
    for (int32_t id : *prompt) {
      std::fprintf(stderr, " %d:'%s'", id, engine.tokenizer().token_text(id).c_str());
    }
    std::fprintf(stderr, "\n");
  }
  auto session = engine.new_session();
  std::string answer;
  auto result = reply(engine, a, *session, *prompt, generate_options(a), &answer);
  if (!result.is_ok()) {
    std::cerr << "\nhypura run: " << result.status().message() << "\n";
    return 1;
  }
  if (a.json) {
    std::printf("%s\n", result_json(*result).dump().c_str());
  } else {
    std::fputs("\n", stdout);
  }
  print_stats(*result);
  return 0;
}

int run_interactive(runtime::Engine& engine, const RunArgs& a) {
  auto session = engine.new_session();
  const runtime::GenerateOptions options = generate_options(a);
  std::vector<runtime::ChatMessage> chat;
  if (!a.system.empty()) chat.push_back({"system", a.system});
  std::string raw_so_far;  // --no-chat: the whole text so far
  std::string first = a.prompt;
  std::fprintf(stderr, "interactive chat: /exit or end of input quits, Ctrl-C stops a reply\n");
  while (true) {
    std::string line;
    if (!first.empty()) {
      line = std::exchange(first, "");
      std::printf("> %s\n", line.c_str());
    } else {
      std::printf("> ");
      std::fflush(stdout);
      if (!std::getline(std::cin, line)) break;
    }
    if (line == "/exit" || line == "/quit") break;
    if (line.empty()) continue;
    chat.push_back({"user", line});
    raw_so_far += line;
    auto prompt = tokenize_turn(engine, a, chat, raw_so_far);
    if (!prompt.is_ok()) {
      std::cerr << "hypura run: " << prompt.status().message() << "\n";
      return 1;
    }
    std::string answer;
    auto result = reply(engine, a, *session, *prompt, options, &answer);
    if (!result.is_ok()) {
      std::cerr << "\nhypura run: " << result.status().message() << "\n";
      return 1;
    }
    chat.push_back({"assistant", answer});
    raw_so_far += result->text;
    std::fputs("\n", stdout);  // the next prompt starts on a line of its own
    print_stats(*result);
  }
  std::printf("\n");
  return 0;
}

int run_run(const RunArgs& a) {
  const std::string path = resolve_model_path(a.model);
  if (path.empty()) {
    std::cerr << "hypura run: no model given and no default model in test-models/ "
                 "(run scripts/fetch-models.sh)\n";
    return 2;
  }
  if (a.prompt.empty() && !a.interactive) {
    std::cerr << "hypura run: give --prompt TEXT or --interactive\n";
    return 2;
  }
  if (a.json && a.interactive) {
    std::cerr << "hypura run: --json prints one reply; it does not go with --interactive\n";
    return 2;
  }
  runtime::EngineOptions eo = engine_options(a.engine, path, a.context);
  eo.trace_path = a.trace;
  eo.draft_model = a.spec.draft;
  if (isatty(STDERR_FILENO)) eo.load_progress = draw_progress;
  const auto t0 = std::chrono::steady_clock::now();
  auto engine = runtime::Engine::load(eo);
  if (!engine.is_ok()) {
    std::cerr << "hypura run: " << path << ": " << engine.status().message() << "\n";
    return 1;
  }
  const double load_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "loaded %s (%s, %s, context %lld) in %.2f s\n", path.c_str(),
               (*engine)->architecture().c_str(), (*engine)->mode().c_str(),
               static_cast<long long>((*engine)->n_ctx()), load_s);
  std::signal(SIGINT, on_sigint);
  return a.interactive ? run_interactive(**engine, a) : run_once(**engine, a);
}

std::function<int()> setup_run(CLI::App& app) {
  auto a = std::make_shared<RunArgs>();
  app.add_option("model", a->model, "GGUF file; default: the default test model");
  app.add_option("-p,--prompt", a->prompt, "prompt text (the first turn with --interactive)");
  app.add_option("--system", a->system, "system message (chat mode)");
  app.add_option("--reasoning-effort", a->reasoning_effort,
                 "reasoning effort for chat templates that take one (gpt-oss: default medium)")
      ->check(CLI::IsMember({"low", "medium", "high"}));
  app.add_option("-n,--max-tokens", a->max_tokens,
                 "tokens to generate at most (-1: until the "
                 "context is full)")
      ->capture_default_str();
  app.add_option("--temperature,--temp", a->temperature, "0: greedy")->capture_default_str();
  app.add_option("--top-k", a->top_k, "0: off")->capture_default_str();
  app.add_option("--top-p", a->top_p, "1: off")->capture_default_str();
  app.add_option("--min-p", a->min_p, "0: off")->capture_default_str();
  app.add_option("--repeat-penalty", a->repeat_penalty, "1: off")->capture_default_str();
  app.add_option("--seed", a->seed, "sampling seed (default: random)");
  app.add_option("--trace", a->trace,
                 "expert-streaming mode: record the routing trace to FILE "
                 "(hypura trace-replay reads it)");
  add_context_option(app, &a->context);
  add_engine_flags(app, &a->engine);
  add_spec_flags(app, &a->spec);
  app.add_option("--stop", a->stop, "stop string (repeatable)");
  app.add_flag("--no-chat", a->no_chat, "feed the prompt as raw text, without the chat template");
  app.add_flag("-i,--interactive", a->interactive, "chat REPL");
  app.add_flag("--show-tokens", a->show_tokens, "print the prompt's token ids to stderr");
  app.add_flag("--json", a->json,
               "print the reply, its token counts, speeds and speculation figures as one JSON "
               "object at the end (stdout holds nothing else)");
  return [a] { return run_run(*a); };
}

const Registrar kRegistrar({"run", "generate text (prompt or interactive chat)", 30, setup_run});

}  // namespace
}  // namespace hypura::cli
