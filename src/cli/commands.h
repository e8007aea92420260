// The subcommands of the qkv executable. Each registers its flags on the app and runs on its own.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace qkv::cli {

struct Command {
  CLI::App* sub;             // the registered subcommand
  std::function<int()> run;  // runs it once its flags are parsed; returns the exit status
};

Command add_walkthrough(CLI::App& app);
Command add_forward(CLI::App& app);

}  // namespace qkv::cli
