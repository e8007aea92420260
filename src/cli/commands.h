// The subcommands of the qkv executable. Each registers its flags on the app and runs on its own.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>


namespace qkv::cli {

struct Command {
  CLI::App* sub;             // the registered subcommand
  std::function<int()> run;  // runs it once its flags are parsed; returns the exit status
};

Command add_walkthrough(CLI::App& app);
Command add_forward(CLI::App& app);
Command add_encode(CLI::App& app);  // encode_command.cc, decode_command.cc, tokens_command.cc
Command add_decode(CLI::App& app);
Command add_tokens(CLI::App& app);
Command add_train(CLI::App& app);     // train_command.cc
Command add_generate(CLI::App& app);  // generate_command.cc
Command add_chat(CLI::App& app);      // chat_command.cc
Command add_bench(CLI::App& app);     // bench_command.cc
Command add_explore(CLI::App& app);   // explore_command.cc
Command add_convert(CLI::App& app);   // convert_command.cc

}  // namespace qkv::cli
