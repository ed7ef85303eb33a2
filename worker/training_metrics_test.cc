#include "worker/training_metrics.h"

#include <string>

#include "gtest/gtest.h"
#include "net/metrics_scrape.h"

namespace ps::worker {
namespace {

TEST(TrainingMetricsTest, EachTasksFiguresCarryItsName) {
  auto metrics = TrainingMetrics::Start("127.0.0.1:0", 2);
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  // No evaluation yet: no test gauge at all (no 0 that reads as a result).
  std::string text = ScrapeMetrics((*metrics)->address());
  ASSERT_NE(text.find("ps_worker_train_loss"), std::string::npos) << text;
  EXPECT_EQ(text.find("ps_worker_test_auc{"), std::string::npos) << text;

  (*metrics)->SetRecent(0.5, {{"ctr", 10, 0.71, 0.4}, {"cvr", 4, 0.62, 0.2}});
  (*metrics)->SetTest({{"ctr", 100, 0.75, 0.45}, {"cvr", 40, 0.66, 0.12}});
  (*metrics)->SetProgressiveValidation({{"ctr", 9, 0.7, 0.5}});
  text = ScrapeMetrics((*metrics)->address());
  for (const char* line :
       {"ps_worker_train_auc{worker=\"2\",task=\"cvr\"} 0.62",
        "ps_worker_test_auc{worker=\"2\",task=\"ctr\"} 0.75",
        "ps_worker_test_auc{worker=\"2\",task=\"cvr\"} 0.66",
        "ps_worker_test_logloss{worker=\"2\",task=\"cvr\"} 0.12",
        "ps_worker_progressive_auc{worker=\"2\",task=\"ctr\"} 0.7",
        "ps_worker_progressive_logloss{worker=\"2\",task=\"ctr\"} 0.5"}) {
    EXPECT_NE(text.find(line), std::string::npos) << line << "\n" << text;
  }
}

}  // namespace
}  // namespace ps::worker
