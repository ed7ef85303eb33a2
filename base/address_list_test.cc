#include "base/address_list.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace ps {
namespace {

TEST(SplitAddressListTest, DropsTheSpacesAroundEachAddressAndEmptyEntries) {
  EXPECT_EQ(SplitAddressList("10.0.0.1:50051, 10.0.0.2:50051 ,,\t10.0.0.3:1 "),
            (std::vector<std::string>{"10.0.0.1:50051", "10.0.0.2:50051",
                                      "10.0.0.3:1"}));
  EXPECT_EQ(SplitAddressList("[::1]:2379"),
            (std::vector<std::string>{"[::1]:2379"}));
  EXPECT_TRUE(SplitAddressList(" , ").empty());
  EXPECT_TRUE(SplitAddressList("").empty());
}

}  // namespace
}  // namespace ps
