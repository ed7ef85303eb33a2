#include "base/usable_cores.h"

#include "gtest/gtest.h"

namespace ps {
namespace {

TEST(UsableCoresTest, ACpuQuotaRoundsUpToCores) {
  EXPECT_EQ(CoresOfCpuMax("max", 100000), 0);
  EXPECT_EQ(CoresOfCpuMax("200000", 100000), 2);
  EXPECT_EQ(CoresOfCpuMax("150000", 100000), 2);
  EXPECT_EQ(CoresOfCpuMax("50000", 100000), 1);
  EXPECT_EQ(CoresOfCpuMax("junk", 100000), 0);
  EXPECT_EQ(CoresOfCpuMax("100000", 0), 0);
}

TEST(UsableCoresTest, AtLeastOneAndNoMoreThanTheMachine) {
  const int cores = UsableCores();
  EXPECT_GE(cores, 1);
  EXPECT_LE(cores, static_cast<int>(std::thread::hardware_concurrency()));
}

}  // namespace
}  // namespace ps
