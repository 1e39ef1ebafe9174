// util::empty_huge: blocks of at least 1 MB are 2 MB-aligned, hold what is written to them, are
// in 2 MB pages where the kernel's transparent huge pages allow it, and are given back when the
// tensor dies; smaller ones are torch::empty's. util::share_huge_block keeps every tensor's
// values and shape, each on its own 64-byte line of one block.
#include "txl/util/huge_pages.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>

namespace txl::util {
namespace {

uintptr_t address(const torch::Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()); }

// The kernel's transparent huge page mode ("always", "madvise", "never"), "" where unknown.
std::string thp_mode() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  if (!std::getline(in, line)) return "";
  const auto open = line.find('['), close = line.find(']');
  if (open == std::string::npos || close == std::string::npos) return "";
  return line.substr(open + 1, close - open - 1);
}

// kB of 2 MB pages in this process's mapping that holds `where`, -1 where /proc says nothing.
int64_t huge_kb_at(uintptr_t where) {
  std::ifstream in("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(in, line)) {
    uintptr_t begin = 0, end = 0;
    char dash = 0;
    std::istringstream range(line);
    if (range >> std::hex >> begin >> dash >> end && dash == '-') {
      inside = begin <= where && where < end;
      continue;
    }
    if (inside && line.rfind("AnonHugePages:", 0) == 0) return std::stoll(line.substr(14));
  }
  return -1;
}

// The kernel's count of huge page faults that fell back to 4 KB pages (no 2 MB page free).
int64_t thp_fallbacks() {
  std::ifstream in("/proc/vmstat");
  std::string key;
  int64_t value = 0;
  while (in >> key >> value) {
    if (key == "thp_fault_fallback") return value;
  }
  return 0;
}

int64_t resident_mb() {
  std::ifstream in("/proc/self/statm");
  int64_t pages = 0, resident = 0;
  in >> pages >> resident;
  return resident * sysconf(_SC_PAGESIZE) / (1 << 20);
}

TEST(EmptyHuge, LargeBlocksAreAlignedAndHoldTheirValues) {
  const int64_t fallbacks = thp_fallbacks();
  auto t = empty_huge({3, 1 << 18}, torch::kFloat);  // [3, 262144]: 3 MB
  EXPECT_EQ(t.sizes(), (std::vector<int64_t>{3, 1 << 18}));
  EXPECT_EQ(t.scalar_type(), torch::kFloat);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(address(t) % kHugePageBytes, 0u);
  auto values = torch::arange(t.numel(), torch::kFloat).view(t.sizes());
  t.copy_(values);
  EXPECT_TRUE(torch::equal(t, values));
  const auto mode = thp_mode();
  if (mode != "always" && mode != "madvise") GTEST_SKIP() << "transparent huge pages: " << mode;
  // Touched, the first 2 MB are one huge page unless the kernel had none free (then it falls
  // back to 4 KB pages, which only costs speed).
  if (thp_fallbacks() > fallbacks) GTEST_SKIP() << "the kernel had no free 2 MB page";
  EXPECT_GE(huge_kb_at(address(t)), 2048) << "no 2 MB page for an madvise(MADV_HUGEPAGE) block";
}

TEST(EmptyHuge, SmallBlocksAndOtherDtypesAreTorchEmptys) {
  auto small = empty_huge({1000}, torch::kFloat);  // 4 KB
  EXPECT_EQ(small.numel(), 1000);
  auto doubles = empty_huge({1 << 18}, torch::kDouble);  // 2 MB
  EXPECT_EQ(doubles.scalar_type(), torch::kDouble);
  EXPECT_EQ(address(doubles) % kHugePageBytes, 0u);
  doubles.fill_(2.5);
  EXPECT_EQ(doubles.sum().item<double>(), 2.5 * (1 << 18));
}

TEST(EmptyHuge, FreedBlocksAreGivenBack) {
  const int64_t before = resident_mb();
  for (int i = 0; i < 100; ++i) {
    auto t = empty_huge({1 << 21}, torch::kFloat);  // 8 MB, touched
    t.fill_(1.0f);
  }
  EXPECT_LT(resident_mb() - before, 100) << "800 MB allocated in turn, most of it still resident";
}

TEST(ShareHugeBlock, KeepsValuesAndShapesOnOwnLines) {
  torch::manual_seed(3);
  std::vector<torch::Tensor> tensors = {torch::randn({7, 13}), torch::randn({300, 1024}),
                                        torch::randn({5}), torch::randn({2, 3, 4}).transpose(0, 2)};
  std::vector<torch::Tensor> copies;
  std::vector<torch::Tensor*> pointers;
  for (auto& t : tensors) {
    copies.push_back(t.clone());
    pointers.push_back(&t);
  }
  share_huge_block(pointers);
  uintptr_t previous_end = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    EXPECT_TRUE(torch::equal(tensors[i], copies[i])) << i;
    EXPECT_EQ(tensors[i].sizes(), copies[i].sizes()) << i;
    EXPECT_TRUE(tensors[i].is_contiguous()) << i;
    EXPECT_EQ(address(tensors[i]) % 64, 0u) << i;
    EXPECT_GE(address(tensors[i]), previous_end) << i << " overlaps the one before";
    previous_end = address(tensors[i]) + tensors[i].numel() * tensors[i].element_size();
  }
  // 1.2 MB in all: one block of 2 MB pages.
  EXPECT_EQ(address(tensors.front()) % kHugePageBytes, 0u);
  EXPECT_LE(previous_end - address(tensors.front()), static_cast<uintptr_t>(kHugePageBytes));
}

TEST(ShareHugeBlock, MixedDtypesAreErrors) {
  auto a = torch::zeros({4}, torch::kFloat);
  auto b = torch::zeros({4}, torch::kDouble);
  EXPECT_THROW(share_huge_block({&a, &b}), c10::Error);
  share_huge_block({});  // nothing to do
}

}  // namespace
}  // namespace txl::util
