#include "txl/ops/rel_shift.h"

#include "txl/util/error.h"

namespace txl::ops {

torch::Tensor rel_shift(const torch::Tensor& x) {
  TXL_CHECK(x.dim() >= 2, "rel_shift: expected [..., Q, K], got ", x.dim(), "-D");
  const int64_t q_len = x.size(-2);
  const int64_t k_len = x.size(-1);
  TXL_CHECK(k_len >= q_len, "rel_shift: needs K >= Q (keys are memory + segment), got Q = ",
            q_len, ", K = ", k_len);
  std::vector<int64_t> lead(x.sizes().begin(), x.sizes().end() - 2);
  // Zero column in front: row i of the flat buffer starts at i (K+1); the only copy.
  auto padded = torch::constant_pad_nd(x, {1, 0}).contiguous();  // [..., Q, K+1]
  // Re-read the buffer as K+1 rows of Q and drop the first Q elements: element (i, j) of the
  // result sits at flat offset Q + i K + j = i (K+1) + 1 + (j + Q-1-i), which is
  // x[i, j + Q-1-i] whenever j + Q-1-i <= K-1.
  auto as_rows = lead;
  as_rows.push_back(k_len + 1);
  as_rows.push_back(q_len);
  auto out_shape = lead;
  out_shape.push_back(q_len);
  out_shape.push_back(k_len);
  return padded.view(as_rows).narrow(-2, 1, k_len).view(out_shape);  // [..., Q, K], a view
}

}  // namespace txl::ops
