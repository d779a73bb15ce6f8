// hypura: one binary, one subcommand per file (see command.h).
#include "cli/command.h"

int main(int argc, char** argv) {
  return hypura::cli::run_cli(argc, argv);
}
