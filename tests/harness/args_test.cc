// Args (harness/commands/args.h): the comma-separated index lists of `kvbench logits --ids` and
// `kvbench art-trace --index`.
#include "harness/commands/args.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/errors.h"

namespace kvb {
namespace {

TEST(Args, IndicesAreReadInOrderWithRepeats) {
  const Args args("logits", {"--ids", "3,0,17,3"}, {});
  EXPECT_EQ(args.get_indices("ids", "token ids"), (std::vector<int>{3, 0, 17, 3}));
  const Args one("logits", {"--ids", "42"}, {});
  EXPECT_EQ(one.get_indices("ids", "token ids"), (std::vector<int>{42}));
}

TEST(Args, BadIndicesNameTheOptionTheItemAndTheList) {
  for (const std::string text : {"1,,2", "1,-4", "1,x", "", "2,"}) {
    const Args args("art-trace", {"--index", text}, {});
    try {
      args.get_indices("index", "line numbers");
      FAIL() << "accepted '" << text << "'";
    } catch (const InputError& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("kvbench art-trace: --index expects comma-separated line numbers"),
                std::string::npos)
          << message;
      EXPECT_NE(message.find("'" + text + "'"), std::string::npos) << message;
    }
  }
}

}  // namespace
}  // namespace kvb
