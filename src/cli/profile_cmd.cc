// `hypura profile [--refresh] [--reserve SIZE] [--json] [--dir PATH | --file PATH]
//                 [--profile FILE] [--scratch SIZE]`: measure (or show the cached) hardware
// profile: CPU, RAM and its limit, GPU, memory bandwidth, storage read bandwidth.
//
// The profile is cached in $XDG_CACHE_HOME/hypura/profile.json (schema: docs/PROFILE.md)
// and reused by run/bench/serve/inspect; --refresh measures again. Progress on stderr.
#include <iostream>
#include <memory>

#include "cli/command.h"
#include "common/size.h"
#include "profiler/profiler.h"

namespace hypura::cli {
namespace {

struct ProfileArgs {
  bool refresh = false;
  bool json = false;
  std::string reserve;
  std::string scratch = "1G";
  std::string dir, file, profile, cache;
};

int run_profile(const ProfileArgs& args) {
  profiler::ProfileOptions o;
  o.refresh = args.refresh;
  o.storage_dir = args.dir;
  // The filesystem that matters is the one holding the models: the default model's.
  if (args.dir.empty() && args.file.empty()) o.model_path = resolve_model_path("");
  o.storage_file = args.file;
  o.profile_file = args.profile;
  o.cache_path = args.cache;
  if (!args.reserve.empty()) {
    auto r = parse_size(args.reserve);
    if (!r.is_ok()) {
      std::cerr << "hypura profile: --reserve: " << r.status().message() << "\n";
      return 2;
    }
    o.reserve_bytes = *r;
  }
  auto scratch = parse_size(args.scratch);
  if (!scratch.is_ok() || *scratch < (64u << 20)) {
    std::cerr << "hypura profile: --scratch must be a size of at least 64M\n";
    return 2;
  }
  o.scratch_bytes = *scratch;
  auto profile = profiler::load_or_measure(o);
  if (!profile.is_ok()) {
    std::cerr << "hypura profile: " << profile.status().message() << "\n";
    return 1;
  }
  std::cout << (args.json ? profiler::profile_to_json(*profile)
                          : profiler::profile_to_text(*profile));
  return 0;
}

std::function<int()> setup_profile(CLI::App& app) {
  auto args = std::make_shared<ProfileArgs>();
  app.add_flag("--refresh", args->refresh, "measure again even if a cached profile fits");
  app.add_flag("--json", args->json, "print the profile as JSON (schema in docs/PROFILE.md)");
  app.add_option("--reserve", args->reserve, "RAM kept free for the OS, e.g. 2G (default 2G)");
  app.add_option("--dir", args->dir,
                 "measure the filesystem holding this directory "
                 "(a scratch file is written there, then deleted)");
  app.add_option("--file", args->file, "measure read-only on this existing file (e.g. the model)");
  app.add_option("--scratch", args->scratch, "scratch file size (default 1G)");
  app.add_option("--profile", args->profile, "show this profile file instead of measuring");
  app.add_option("--cache", args->cache,
                 "cache file (default $XDG_CACHE_HOME/hypura/profile.json)");
  return [args] { return run_profile(*args); };
}

const Registrar kRegistrar({"profile", "measure this machine: CPU, RAM, GPU, storage bandwidth", 10,
                            setup_profile});

}  // namespace
}  // namespace hypura::cli
