// Views allocate nothing: every global operator new in this binary is counted (a replaced global
// operator new; counting_new.h; the alloc tests have their own binary so nothing else in the suite runs under the counter),
// and transpose, select, slice, view, unsqueeze, squeeze, expand, T, reshape and contiguous of a
// contiguous tensor, and copies of a Tensor, must leave the count where it was. With a
// std::vector shape, or a name held as std::string, each view would allocate.
// (Storage itself comes from aligned_alloc, not operator new; views never touch storage, and the
// shared_ptr control block of a new buffer is counted, which the clone() check below relies on.)
#include <gtest/gtest.h>

#include "counting_new.h"

#include <atomic>
#include <cstdlib>
#include <new>

#include "qkv/core/tensor.h"

namespace qkv {
namespace {

TEST(TensorViewAllocations, ViewsOfAnExistingTensorAllocateNothing) {
  Tensor x = Tensor::zeros({2, 3, 4, 5});
  x.set_name("a name longer than any small-string buffer");
  Tensor row = Tensor::zeros({5});
  const long before = allocations();
  const float* sink = nullptr;
  long elements = 0;
  auto use = [&](const Tensor& t) {
    sink = t.data();
    elements += t.numel();
  };
  for (int rep = 0; rep < 3; ++rep) {
    use(x.transpose(1, 2));
    use(x.select(0, 1));
    use(x.slice(2, 1, 3));
    use(x.view({6, -1}));
    use(x.view({2, 3, 20}).unsqueeze(1).squeeze(1));
    use(x.unsqueeze(-1));
    use(row.expand({7, 3, 5}));
    use(x.T());
    use(x.reshape({120}));
    use(x.contiguous());
    use(x.select(0, 0).select(0, 2).transpose(0, 1).slice(0, 0, 2));
    Tensor copy = x;
    use(copy);
    copy = row;
    use(copy);
  }
  const long after = allocations();
  EXPECT_EQ(after - before, 0) << "views allocated " << (after - before) << " times";
  EXPECT_NE(sink, nullptr);
  EXPECT_GT(elements, 0);
  // The counter does see allocations: a clone makes a new buffer (its control block is counted).
  const long b2 = allocations();
  use(x.clone());
  EXPECT_GT(allocations() - b2, 0);
}

}  // namespace
}  // namespace qkv
