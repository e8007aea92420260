// The corpus replay: a main for a fuzz target's LLVMFuzzerTestOneInput that runs it once on every
// file of the directories (or files) given, in name order, so the seeds and the committed crash
// inputs (regress-*) are ordinary tests under any compiler, sanitizers or not.
//   fuzz_replay_safetensors fuzz/corpus/safetensors
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR_OR_FILE...\n", argv[0]);
    return 2;
  }
  std::vector<fs::path> files;
  for (int a = 1; a < argc; ++a) {
    const fs::path p(argv[a]);
    if (fs::is_directory(p)) {
      for (const fs::directory_entry& e : fs::recursive_directory_iterator(p))
        if (e.is_regular_file()) files.push_back(e.path());
    } else if (fs::is_regular_file(p)) {
      files.push_back(p);
    } else {
      std::fprintf(stderr, "%s: no such file or directory\n", argv[a]);
      return 2;
    }
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) {  // an empty corpus would pass while testing nothing
    std::fprintf(stderr, "no corpus files under the arguments given\n");
    return 1;
  }
  for (const fs::path& f : files) {
    std::ifstream in(f, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (!in.good() && !in.eof()) {
      std::fprintf(stderr, "%s: cannot read\n", f.c_str());
      return 1;
    }
    std::fprintf(stderr, "replay %s (%zu bytes)\n", f.c_str(), bytes.size());
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  }
  std::fprintf(stderr, "replayed %zu inputs\n", files.size());
  return 0;
}
