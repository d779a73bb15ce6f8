// `hypura rm NAME...`: delete pulled models (their files and manifest entries).
#include <iostream>
#include <memory>
#include <vector>

#include "cli/command.h"
#include "store/model_store.h"

namespace hypura::cli {
namespace {

struct RmArgs {
  std::vector<std::string> names;
  std::string models_dir;
};

int run_rm(const RmArgs& args) {
  Result<store::ModelStore> s = store::ModelStore::open(args.models_dir);
  if (!s.is_ok()) {
    std::cerr << "hypura rm: " << s.status().message() << "\n";
    return 1;
  }
  int rc = 0;
  for (const std::string& name : args.names) {
    const Status st = s->remove(name);
    if (st.is_ok()) {
      std::cout << "deleted " << name << "\n";
    } else {
      std::cerr << "hypura rm: " << st.message() << "\n";
      rc = 1;
    }
  }
  return rc;
}

std::function<int()> setup_rm(CLI::App& app) {
  auto args = std::make_shared<RmArgs>();
  app.add_option("names", args->names, "pulled models to delete (hypura list)")->required();
  add_models_dir_option(app, &args->models_dir);
  return [args] { return run_rm(*args); };
}

const Registrar kRegistrar({"rm", "delete pulled models", 17, setup_rm});

}  // namespace
}  // namespace hypura::cli
