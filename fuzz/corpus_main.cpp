// Runs a fuzz target's body over files (its committed corpus) in an ordinary build, so every CI
// run exercises the targets without libFuzzer: `fuzz_<target>_corpus <file or directory>...`.
// Any violated invariant aborts, as it does under libFuzzer.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace {

void run_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)),
                                std::istreambuf_iterator<char>());
  (void)LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
}

}  // namespace

int main(int argc, char* argv[]) {
  std::size_t inputs = 0;
  for (int i = 1; i < argc; ++i) {
    const std::filesystem::path path(argv[i]);
    if (std::filesystem::is_directory(path)) {
      for (const auto& entry : std::filesystem::directory_iterator(path)) {
        if (!entry.is_regular_file()) continue;
        run_file(entry.path());
        ++inputs;
      }
    } else {
      run_file(path);
      ++inputs;
    }
  }
  std::printf("%s: %zu corpus inputs ran, every invariant held\n", argv[0], inputs);
  return inputs == 0 ? 1 : 0;
}
