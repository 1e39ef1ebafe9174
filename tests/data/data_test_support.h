#pragma once
// Helpers shared by the data tests.

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "txl/config/config.h"
#include "txl/data/corpus.h"

namespace txl::test {

// True when the `bible` program (package bible-kjv) is on PATH.
inline bool bible_available() {
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "";
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    std::string dir = dirs.substr(start, end - start);
    if (!dir.empty() && ::access((std::filesystem::path(dir) / "bible").c_str(), X_OK) == 0)
      return true;
    start = end + 1;
  }
  return false;
}

// The first `n` verses of the KJV train split (Genesis onwards), real text for tokenizers.
inline std::vector<std::string> kjv_verses(size_t n) {
  config::DataConfig cfg;
  cfg.corpus = txl::config::Corpus::kKjv;
  auto lines = data::make_corpus_reader(cfg)->read().train.lines;
  lines.resize(std::min(n, lines.size()));
  return lines;
}

}  // namespace txl::test
