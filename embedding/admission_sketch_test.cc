#include "embedding/admission_sketch.h"

#include <cstdint>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace ps::embedding {
namespace {

TEST(AdmissionSketchTest, AKeyIsAdmittedAtItsThresholdthPush) {
  AdmissionSketch sketch(1 << 20, 3);
  EXPECT_FALSE(sketch.CountAndAdmit(42));
  EXPECT_FALSE(sketch.CountAndAdmit(42));
  EXPECT_EQ(sketch.Count(42), 2u);
  EXPECT_TRUE(sketch.CountAndAdmit(42));
  EXPECT_TRUE(sketch.CountAndAdmit(42));
  // Another key counts from zero.
  EXPECT_EQ(sketch.Count(43), 0u);
  EXPECT_FALSE(sketch.CountAndAdmit(43));
}

TEST(AdmissionSketchTest, CountsAreNeverLowAndRarelyHighWithinAnAgingWindow) {
  // 4 x 32768 counters against 20000 keys pushed once and 100 pushed 5
  // times: 20500 pushes, within one aging window (32768).
  AdmissionSketch sketch(4 * 32768, 5);
  for (uint64_t key = 0; key < 20000; ++key) sketch.CountAndAdmit(key);
  for (int push = 0; push < 5; ++push) {
    for (uint64_t key = 1000000; key < 1000100; ++key)
      sketch.CountAndAdmit(key);
  }
  for (uint64_t key = 1000000; key < 1000100; ++key)
    EXPECT_GE(sketch.Count(key), 5u) << key;
  // e * N / width = 2.718 * 20500 / 32768, about 1.7: a count over 1 + 2
  // has probability below e^-4 per key.
  int over = 0, admitted_early = 0;
  for (uint64_t key = 0; key < 20000; ++key) {
    over += sketch.Count(key) > 3;
    admitted_early += sketch.Count(key) >= 5;
  }
  EXPECT_LT(over, 20000 * 0.02);
  EXPECT_LT(admitted_early, 20000 / 100);
}

TEST(AdmissionSketchTest, CountsSaturateInsteadOfWrapping) {
  AdmissionSketch sketch(1 << 12, 255);  // no aging in 300 pushes
  for (int push = 0; push < 300; ++push) sketch.CountAndAdmit(7);
  EXPECT_EQ(sketch.Count(7), 255u);
  EXPECT_TRUE(sketch.CountAndAdmit(7));
}

TEST(AdmissionSketchTest, ConcurrentPushesAreAllCountedOrOvercounted) {
  AdmissionSketch sketch(1 << 20, 255);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int push = 0; push < 50; ++push) sketch.CountAndAdmit(99);
    });
  }
  for (auto& thread : threads) thread.join();
  // 200 increments; a race can only lose an increment to a CAS that saw
  // the minimum move, never take one back.
  EXPECT_GE(sketch.Count(99), 50u);
  EXPECT_LE(sketch.Count(99), 200u);
}

TEST(AdmissionSketchTest, CountsAgeSoThatAnEndlessStreamDoesNotSaturate) {
  // 4 x 1024 counters: every 1024 pushes counted, every count halves.
  AdmissionSketch sketch(4 * 1024, 8);
  for (int push = 0; push < 6; ++push) sketch.CountAndAdmit(42);
  EXPECT_EQ(sketch.Count(42), 6u);
  for (uint64_t key = 1000; key < 1000 + 1024 - 6; ++key)
    sketch.CountAndAdmit(key);
  EXPECT_EQ(sketch.Count(42), 3u);
  // A stream of new keys many times the width leaves single pushes
  // unadmitted: without aging, conservative update alone would fill every
  // counter past the threshold.
  int admitted = 0;
  for (uint64_t key = 1 << 20; key < (1 << 20) + 100000; ++key)
    admitted += sketch.CountAndAdmit(key);
  EXPECT_LT(admitted, 1000);
}

}  // namespace
}  // namespace ps::embedding
