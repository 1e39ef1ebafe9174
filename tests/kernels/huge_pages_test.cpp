// empty_huge: on Linux, blocks of at least 1 MB are 2 MB-aligned, hold what is written to
// them, are in 2 MB pages where the kernel allows it, and are unmapped when the tensor dies;
// smaller ones are torch::empty's. share_huge_block keeps every tensor's values and shape,
// each on its own 64-byte line of one storage, and refuses what it cannot move.
#include "txl/kernels/huge_pages.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>

namespace txl::kernels {
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

// The kernel's count of huge page faults that fell back to 4 KB pages (none free, or the
// cgroup's limit).
int64_t thp_fallbacks() {
  std::ifstream in("/proc/vmstat");
  std::string key;
  int64_t value = 0, sum = 0;
  while (in >> key >> value) {
    if (key == "thp_fault_fallback" || key == "thp_fault_fallback_charge") sum += value;
  }
  return sum;
}

// Why this process gets no 2 MB pages from madvise, or "" when it may.
std::string no_huge_pages_because() {
  const auto mode = thp_mode();
  if (mode != "always" && mode != "madvise") return "transparent huge pages: '" + mode + "'";
  std::ifstream pmd("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size");
  int64_t size = 0;
  if (!(pmd >> size) || size != kHugePageBytes) return "huge pages are not 2 MB here";
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("THP_enabled:", 0) == 0 && line.find('0') != std::string::npos) {
      return "huge pages disabled for this process";
    }
  }
  return "";
}

// This process's mapped (index 0) or resident (index 1) MB, from /proc/self/statm.
int64_t statm_mb(int index) {
  std::ifstream in("/proc/self/statm");
  int64_t field[2] = {0, 0};
  in >> field[0] >> field[1];
  return field[index] * sysconf(_SC_PAGESIZE) / (1 << 20);
}

TEST(EmptyHuge, LargeBlocksAreAlignedAndHoldTheirValues) {
  const int64_t fallbacks = thp_fallbacks();
  auto t = empty_huge({3, 1 << 18}, torch::kFloat);  // [3, 262144]: 3 MB
  EXPECT_EQ(t.sizes(), (std::vector<int64_t>{3, 1 << 18}));
  EXPECT_EQ(t.scalar_type(), torch::kFloat);
  EXPECT_TRUE(t.is_contiguous());
  auto values = torch::arange(t.numel(), torch::kFloat).view(t.sizes());  // [3, 262144]
  t.copy_(values);
  EXPECT_TRUE(torch::equal(t, values));
#if defined(__linux__)
  EXPECT_EQ(address(t) % kHugePageBytes, 0u);
  EXPECT_FALSE(t.storage().resizable());  // its own block, not the allocator's
  const auto why_not = no_huge_pages_because();
  if (!why_not.empty()) GTEST_SKIP() << why_not;
  // Touched, the first 2 MB are one huge page unless the kernel had none to give (then it
  // falls back to 4 KB pages, which only costs speed).
  if (thp_fallbacks() > fallbacks) GTEST_SKIP() << "the kernel had no free 2 MB page";
  const int64_t huge_kb = huge_kb_at(address(t));
  if (huge_kb < 0) GTEST_SKIP() << "/proc/self/smaps tells no AnonHugePages";
  EXPECT_GE(huge_kb, 2048) << "no 2 MB page for an madvise(MADV_HUGEPAGE) block";
#endif
}

TEST(EmptyHuge, BlocksBelowAMegabyteAreTorchEmptys) {
  const int64_t below = kHugePageMinBytes / 4 - 1;  // floats
  auto small = empty_huge({below}, torch::kFloat);  // [below]: 4 bytes under 1 MB
  EXPECT_EQ(small.numel(), below);
  EXPECT_TRUE(small.storage().resizable());                            // the allocator's
  auto doubles = empty_huge({kHugePageMinBytes / 8}, torch::kDouble);  // [131072]: 1 MB
  EXPECT_EQ(doubles.scalar_type(), torch::kDouble);
#if defined(__linux__)
  EXPECT_FALSE(doubles.storage().resizable());
  EXPECT_EQ(address(doubles) % kHugePageBytes, 0u);
#endif
  doubles.fill_(2.5);
  EXPECT_EQ(doubles.sum().item<double>(), 2.5 * static_cast<double>(doubles.numel()));
  EXPECT_THROW(empty_huge({-1, -(1 << 20)}, torch::kFloat), c10::Error);  // as torch::empty
}

TEST(EmptyHuge, FreedBlocksAreGivenBack) {
  const int64_t mapped = statm_mb(0), resident = statm_mb(1);
  for (int i = 0; i < 100; ++i) {
    auto t = empty_huge({3 << 18}, torch::kFloat);  // [786432]: 3 MB in a 4 MB block, touched
    t.fill_(1.0f);
  }
  EXPECT_LT(statm_mb(1) - resident, 100) << "400 MB allocated in turn, much still resident";
  EXPECT_LT(statm_mb(0) - mapped, 100) << "400 MB allocated in turn, much still mapped";
}

TEST(ShareHugeBlock, KeepsValuesAndShapesOnOwnLines) {
  torch::manual_seed(3);
  // [7, 13], [300, 1024], [5], [4, 3, 2] (not contiguous)
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
  for (const auto& t : tensors) EXPECT_TRUE(t.is_alias_of(tensors.front()));
#if defined(__linux__)
  EXPECT_EQ(address(tensors.front()) % kHugePageBytes, 0u);
#endif
  EXPECT_LE(previous_end - address(tensors.front()), static_cast<uintptr_t>(kHugePageBytes));
}

TEST(ShareHugeBlock, MixedDtypesAndUndefinedTensorsAreErrors) {
  auto a = torch::zeros({4}, torch::kFloat);   // [4]
  auto b = torch::zeros({4}, torch::kDouble);  // [4]
  torch::Tensor none;
  EXPECT_THROW(share_huge_block({&a, &b}), c10::Error);
  EXPECT_THROW(share_huge_block({&none, &a}), c10::Error);
  EXPECT_THROW(share_huge_block({&a, nullptr}), c10::Error);
  share_huge_block({});                              // nothing to do
  auto empty = torch::zeros({0, 3}, torch::kFloat);  // [0, 3]
  share_huge_block({&empty, &a});
  EXPECT_EQ(empty.sizes(), (std::vector<int64_t>{0, 3}));
  EXPECT_TRUE(torch::equal(a, torch::zeros({4})));
}

}  // namespace
}  // namespace txl::kernels
