// qkv: the command line. Parses arguments, calls the library, prints. Errors go to stderr with
// the exit statuses of kExitCodes below.
#include <csignal>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <new>
#include <string>
#include <vector>

#include "commands.h"
#include "flags.h"
#include "qkv/io/standard_output.h"
#include "qkv/models/family.h"
#include "qkv/core/error.h"
#include "qkv/core/excerpt.h"
#include "qkv/core/bf16.h"
#include "qkv/core/gemm.h"
#include "qkv/core/machine.h"
#include "qkv/kernels/simd.h"
#include "qkv/text/bpe.h"

namespace {

constexpr const char* kExitCodes =
    "Exit status: 0 success; 1 runtime error (bad input, a file that cannot be read or written,\n"
    "a full standard output); 2 usage error (an unknown flag, a missing or malformed value);\n"
    "130 interrupted by Ctrl-C (qkv train, after writing its checkpoint; 143 for SIGTERM).\n\n"
    "Environment (docs/cli.md): QKV_NUM_THREADS (threads without --threads), QKV_SIMD (avx2, avx3,\n"
    "avx3_dl, scalar: the best SIMD target the kernels may use), QKV_GEMM (qkv, openblas), QKV_BF16_DOT\n"
    "(on, off), QKV_PREFETCH (l1, l1-nta, l2, l1+l2: where the kernels' prefetches go), QKV_VOCAB_DIR\n"
    "(GPT-2's vocabulary files), QKV_MPI_TIMEOUT (seconds an MPI wait may take). A bad QKV_SIMD,\n"
    "QKV_GEMM, QKV_BF16_DOT or QKV_PREFETCH is an error before any command runs.";

// "qkv: error: MESSAGE" and a newline in one write, so that other processes writing to the same
// stream (the ranks under mpirun, mpirun itself) cannot cut the line.
void print_error(const std::string& message) {
  const std::string line = "qkv: error: " + message + "\n";
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

int run(int argc, char** argv) {
  CLI::App app{"qkv: transformer attention, the book's GPT model, " +
                   qkv::family_titles(qkv::has_hf_folder) +
                   ", exact to PyTorch",
               "qkv"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "qkv 0.1.0");
  app.footer(kExitCodes);
  // CLI11's own refusals (a missing flag, a value outside a set) read as qkv's other errors do.
  app.failure_message([](const CLI::App*, const CLI::Error& e) {
    std::string what = e.what();
    // a flag given twice: "--steps: At Most 1 required but received 2" in CLI11's words
    const std::string at_most = ": At Most 1 required but received ";
    if (const size_t p = what.find(at_most); p != std::string::npos && e.get_name() == "ArgumentMismatch")
      what = what.substr(0, p) + ": given " + what.substr(p + at_most.size()) + " times; give it once";
    return "qkv: error: " + what + "\nRun with --help for more information.\n";
  });
  const std::vector<qkv::cli::Command> commands = {qkv::cli::add_walkthrough(app), qkv::cli::add_forward(app),
                                                  qkv::cli::add_encode(app), qkv::cli::add_decode(app), qkv::cli::add_tokens(app),
                                                  qkv::cli::add_train(app), qkv::cli::add_generate(app), qkv::cli::add_chat(app),
                                                  qkv::cli::add_bench(app), qkv::cli::add_explore(app),
                                                  qkv::cli::add_convert(app)};
  for (const qkv::cli::Command& c : commands) qkv::cli::add_limit_flags(c.sub);
  // "--flag=" is the flag with an empty value, as "--flag ''" is (--checkpoint= : no checkpoint):
  // CLI11 alone takes the argument after it as the value (--checkpoint= --quiet wrote a file
  // named --quiet).
  std::vector<std::string> args;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    const size_t eq = a.find('=');
    if (i > 0 && a.size() > 3 && a.compare(0, 2, "--") == 0 && eq == a.size() - 1) {
      args.push_back(a.substr(0, eq));
      args.emplace_back();
    } else {
      args.push_back(a);
    }
  }
  std::vector<char*> pointers;
  for (std::string& a : args) pointers.push_back(a.data());
  try {
    app.parse(static_cast<int>(pointers.size()), pointers.data());
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);  // prints the help, the version or the error
    return code == 0 ? 0 : 2;      // --help and --version are successes; the rest bad usage
  }
  try {
    qkv::gemm_backend();      // a bad $QKV_GEMM is an error before any command starts
    qkv::bf16_dot_allowed();  // and a bad $QKV_BF16_DOT
    qkv::burst_prefetch();   // and a bad $QKV_PREFETCH
    qkv::kernels::apply_simd_environment();  // and $QKV_SIMD, before any kernel runs
    for (const qkv::cli::Command& c : commands)
      if (c.sub->parsed()) return c.run();
  } catch (const qkv::DisallowedSpecialError& e) {  // the library's words, then the flags that say it
    print_error(std::string(e.what()) + ". On the command line: --allowed-special " + qkv::excerpt(e.token) +
                " (or all) to encode it as the special token, --disallowed-special none to encode it as text");
    return 1;
  } catch (const CLI::ParseError& e) {  // a flag found wrong while running (flags.h's checks)
    print_error(e.what());
    return 2;
  } catch (const std::bad_alloc& e) {  // (and std::bad_array_new_length) a request the checks did not foresee
    print_error(std::string("out of memory: an allocation failed (") + e.what() +
                "); the input asks for more memory than this machine gives");
    return 1;
  } catch (const std::exception& e) {
    print_error(e.what() + qkv::cli::limit_hint(e.what()));
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // A file size limit (ulimit -f) makes a write that crosses it fail with EFBIG, which the atomic
  // writes report and clean up after, instead of SIGXFSZ killing the process mid-write and leaving
  // a temporary behind.
  std::signal(SIGXFSZ, SIG_IGN);
  qkv::StdoutCapture capture;  // std::cout remembers why a write failed
  int status = run(argc, argv);
  // Output is only done once it is written: a full disk or closed pipe is an error. (A failure
  // already reported, as by write_stdout, keeps its status and message.)
  if (const int err = qkv::flush_stdout(); err != 0 && status == 0) {
    print_error(std::string("writing to standard output: ") + std::strerror(err));
    status = 1;
  }
  return status;
}
