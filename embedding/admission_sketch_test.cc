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

TEST(AdmissionSketchTest, CountsAreNeverLowAndRarelyHighInASmallSketch) {
  // 4 x 4096 counters against 20000 keys pushed once and 100 pushed 5 times.
  AdmissionSketch sketch(4 * 4096, 5);
  for (uint64_t key = 0; key < 20000; ++key) sketch.CountAndAdmit(key);
  for (int push = 0; push < 5; ++push) {
    for (uint64_t key = 1000000; key < 1000100; ++key)
      sketch.CountAndAdmit(key);
  }
  for (uint64_t key = 1000000; key < 1000100; ++key)
    EXPECT_GE(sketch.Count(key), 5u) << key;
  // e * N / width = 2.718 * 20500 / 4096, about 13.6: a count over 1 + 14
  // has probability below e^-4 per key.
  int over = 0, admitted_early = 0;
  for (uint64_t key = 0; key < 20000; ++key) {
    over += sketch.Count(key) > 15;
    admitted_early += sketch.Count(key) >= 5;
  }
  EXPECT_LT(over, 20000 * 0.02);
  // Conservative update keeps most single-push keys far below that bound.
  EXPECT_LT(admitted_early, 20000 / 2);
}

TEST(AdmissionSketchTest, CountsSaturateInsteadOfWrapping) {
  AdmissionSketch sketch(1 << 10, 255);
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

}  // namespace
}  // namespace ps::embedding
