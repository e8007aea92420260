// qkv: the command line. Parses arguments, calls the library, prints. Errors go to stderr with a
// non-zero exit status: 2 for bad usage, 1 for everything else.
#include <iostream>
#include <vector>

#include "commands.h"
#include "qkv/text/bpe.h"
#include "qkv/core/error.h"

int main(int argc, char** argv) {
  CLI::App app{"qkv: transformer attention from the book's chapter 3, exact to PyTorch", "qkv"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "qkv 0.1.0");
  const std::vector<qkv::cli::Command> commands = {qkv::cli::add_walkthrough(app), qkv::cli::add_forward(app),
                                                  qkv::cli::add_encode(app), qkv::cli::add_decode(app), qkv::cli::add_tokens(app),
                                                  qkv::cli::add_train(app), qkv::cli::add_generate(app),
                                                  qkv::cli::add_bench(app)};
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    for (const qkv::cli::Command& c : commands)
      if (c.sub->parsed()) return c.run();
  } catch (const qkv::DisallowedSpecialError& e) {  // the library's words, then the flags that say it
    std::cerr << "qkv: error: " << e.what() << ". On the command line: --allowed-special '" << e.token
              << "' (or all) to encode it as the special token, --disallowed-special none to encode it as text\n";
    return 1;
  } catch (const qkv::Error& e) {
    std::cerr << "qkv: error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "qkv: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
