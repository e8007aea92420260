// The fixture the command-line tests share: a scratch directory per test, and `qkv ARGS` run in
// it through the shell as a user runs it, with its exit status, standard output and error.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

namespace qkv {

struct Result {
  int status;  // the exit status, or 128 + the signal that ended the process
  std::string out, err;
};

// The whole file, bytes as they are ("" when it cannot be read).
inline std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Single-quoted for the shell.
inline std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// The last line of a command's output parsed as JSON (what --json prints last).
inline nlohmann::json last_json_line(std::string out) {
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return nlohmann::json::parse(out.substr(out.rfind('\n') + 1));
}

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("qkv_cli_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->test_suite_name() + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // A path in this test's scratch directory.
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  std::string write(const std::string& name, const std::string& bytes) const {
    std::ofstream(path(name), std::ios::binary) << bytes;
    return path(name);
  }

  // Runs `qkv ARGS` in the scratch directory, standard input from `stdin_bytes` (empty:
  // /dev/null), `env` (e.g. "QKV_NUM_THREADS=1") before the command.
  Result run(const std::string& args, const std::string& stdin_bytes = "", const std::string& env = "") const {
    const std::string in = stdin_bytes.empty() ? "/dev/null" : write("stdin.txt", stdin_bytes);
    const std::string out = path("stdout.txt"), err = path("stderr.txt");
    const std::string cmd = "cd " + shell_quote(dir_.string()) + " && " + env + " " + std::string(QKV_BINARY) + " " +
                            args + " > " + out + " 2> " + err + " < " + in;
    const int raw = std::system(cmd.c_str());
    return {WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw), slurp(out), slurp(err)};
  }

  std::filesystem::path dir_;
};

}  // namespace qkv
