#pragma once
// Process-wide settings of the C allocator for training and evaluation.
//
// A training step allocates and frees the same large tensors every time (the [N, V] logits and
// their gradient, the [H, B, Q, K] attention scores, the [V, d] gradient of the tied table).
// glibc serves blocks above its mmap threshold (at most 32 MiB) with mmap and gives them back
// with munmap, and trims freed heap memory above 128 KiB, so every step page-faults all of that
// memory in again (the README's "Performance" gives the cost). keep_freed_memory() makes glibc
// serve every block from the heap and keep what is freed (up to 2 GiB at the top) for the next
// step. The resident size stays near the peak between steps, and heap fragmentation can raise
// the peak a little.
// Idempotent; does nothing with another C library.

namespace txl {

void keep_freed_memory();

}  // namespace txl
