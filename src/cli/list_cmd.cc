// `hypura list [--json]`: the models `hypura pull` downloaded (name, size, when pulled).
#include <ctime>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "cli/command.h"
#include "common/size.h"
#include "store/model_store.h"

namespace hypura::cli {
namespace {

struct ListArgs {
  std::string models_dir;
  bool json = false;
};

std::string date_of(int64_t unix_s) {
  const std::time_t t = static_cast<std::time_t>(unix_s);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M UTC", &tm);
  return buf;
}

int run_list(const ListArgs& args) {
  Result<store::ModelStore> s = store::ModelStore::open(args.models_dir);
  Result<std::vector<store::StoredModel>> models =
      s.is_ok() ? s->list() : Result<std::vector<store::StoredModel>>(s.status());
  if (!models.is_ok()) {
    std::cerr << "hypura list: " << models.status().message() << "\n";
    return 1;
  }
  if (args.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const store::StoredModel& m : *models) {
      out.push_back({{"name", m.name},
                     {"size", m.bytes()},
                     {"path", s->dir() + "/" + m.files.front().path},
                     {"pulled_at", m.pulled_at}});
    }
    std::cout << out.dump(1) << "\n";
    return 0;
  }
  if (models->empty()) {
    std::cout << "no models in " << s->dir() << " (hypura pull NAME)\n";
    return 0;
  }
  for (const store::StoredModel& m : *models) {
    std::printf("%-60s %10s  %s\n", m.name.c_str(), format_size(m.bytes()).c_str(),
                date_of(m.pulled_at).c_str());
  }
  return 0;
}

std::function<int()> setup_list(CLI::App& app) {
  auto args = std::make_shared<ListArgs>();
  add_models_dir_option(app, &args->models_dir);
  app.add_flag("--json", args->json, "one JSON array: name, size, path, pulled_at");
  return [args] { return run_list(*args); };
}

const Registrar kRegistrar({"list", "list the models hypura pull downloaded", 16, setup_list});

}  // namespace
}  // namespace hypura::cli
