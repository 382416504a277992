#include "dtensor/ir/gather_join.h"

#include <algorithm>
#include <vector>

namespace dt::ir {

bool block_rows_fold(const Shape& shape, int64_t dim) {
  if (dim < 0 || dim >= int64_t(shape.size())) return false;
  if (dim == int64_t(shape.size()) - 1) return true;
  for (int64_t d = 0; d < dim; ++d)
    if (shape[size_t(d)] != 1) return false;
  return true;
}

std::optional<GatherJoinChain> match_gather_join(const Node& g, const UseLists& uses) {
  if (g.op != OpKind::all_gather_into_tensor || g.results.size() != 1) return std::nullopt;
  auto next = [&](const Node* n, OpKind op) -> const Node* {
    const Node* u = n && n->results.size() == 1 ? uses.sole_user(n->result()) : nullptr;
    return u && u->op == op && u->results.size() == 1 ? u : nullptr;
  };
  GatherJoinChain c;
  c.wait = next(&g, OpKind::wait_tensor);
  c.view = next(c.wait, OpKind::view);
  c.permute = next(c.view, OpKind::permute);
  c.join = next(c.permute, OpKind::reshape);
  if (!c.join) return std::nullopt;
  // The exact shapes stacked_to_dim makes: block p, members [n, p...], members' axis to d.
  const Shape& block = g.operands[0]->type.shape;
  const Shape& members = c.view->result()->type.shape;
  const int64_t n = block.empty() || block[0] == 0 ? 0 : g.result()->type.shape[0] / block[0];
  if (n < 1 || members.size() != block.size() + 1 || members[0] != n ||
      !std::equal(block.begin(), block.end(), members.begin() + 1))
    return std::nullopt;
  const std::vector<int64_t>& dims = c.permute->attr_ints("dims");
  int64_t d = 0;
  while (d < int64_t(dims.size()) && dims[size_t(d)] != 0) ++d;
  std::vector<int64_t> want;
  for (int64_t k = 1; k <= d; ++k) want.push_back(k);
  want.push_back(0);
  for (int64_t k = d + 1; k < int64_t(members.size()); ++k) want.push_back(k);
  if (d < 1 || d >= int64_t(block.size()) || dims != want) return std::nullopt;
  Shape joined = block;
  joined[size_t(d)] *= n;
  if (c.join->result()->type.shape != joined) return std::nullopt;
  c.dim = d;
  return c;
}

}  // namespace dt::ir
