// Replays a fuzz target over every file of the given directories: the
// checked-in corpus (required, non-empty) and crashers (optional), so that
// `bazel test //...` runs every input the fuzzers ever kept or crashed on.
// A crash, sanitizer report or failed invariant in the target fails it.
//
//   replay_main CORPUS_DIR [--optional DIR]...

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  size_t replayed = 0;
  for (int i = 1; i < argc; ++i) {
    bool optional = false;
    std::string dir = argv[i];
    if (dir == "--optional" && i + 1 < argc) {
      optional = true;
      dir = argv[++i];
    }
    if (!std::filesystem::is_directory(dir)) {
      if (optional) continue;
      std::fprintf(stderr, "replay: no directory %s\n", dir.c_str());
      return 1;
    }
    std::vector<std::filesystem::path> files;
    for (const auto& entry : std::filesystem::recursive_directory_iterator(dir))
      if (entry.is_regular_file()) files.push_back(entry.path());
    if (files.empty() && !optional) {
      std::fprintf(stderr, "replay: %s is empty\n", dir.c_str());
      return 1;
    }
    for (const auto& file : files) {
      std::ifstream in(file, std::ios::binary);
      std::stringstream bytes;
      bytes << in.rdbuf();
      const std::string input = bytes.str();
      LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()),
                             input.size());
      ++replayed;
    }
  }
  std::printf("replayed %zu inputs\n", replayed);
  return 0;
}
