// GemmTeam and the GEMM split against references written out here: every
// chunk runs once, a slow thread leaves its share to the others, idle
// helpers take no CPU, and the blocks of a split GEMM compute the whole.

#include "kernels/gemm_team.h"

#include <time.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <random>
#include <stdexcept>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace ps::kernels {
namespace {

TEST(GemmTeamTest, RunsEveryChunkOnceOnEveryJob) {
  for (int threads : {1, 2, 4}) {
    GemmTeam team(threads);
    EXPECT_EQ(team.threads(), threads);
    for (int job = 0; job < 500; ++job) {
      const int chunks = job % 37;
      std::vector<std::atomic<int>> runs(static_cast<size_t>(chunks));
      std::atomic<int> bad_thread{0};
      team.Run(chunks, [&](int chunk, int thread) {
        if (thread < 0 || thread >= threads) ++bad_thread;
        ++runs[static_cast<size_t>(chunk)];
      });
      for (int chunk = 0; chunk < chunks; ++chunk) {
        ASSERT_EQ(runs[static_cast<size_t>(chunk)].load(), 1)
            << "chunk " << chunk << " of " << chunks << ", job " << job << ", "
            << threads << " threads";
      }
      ASSERT_EQ(bad_thread.load(), 0);
    }
    uint64_t total = 0;
    for (uint64_t count : team.ChunksByThread()) total += count;
    uint64_t expected = 0;
    for (int job = 0; job < 500; ++job) expected += job % 37;
    EXPECT_EQ(total, expected);
  }
}

TEST(GemmTeamTest, EveryHelperRunsChunksAfterItsStartFunction) {
  thread_local bool started = false;
  GemmTeam team(3, [] { started = true; });
  // Jobs of three chunks that each wait for all three to be running: they
  // finish only if three threads run them at once. Each job is posted
  // after a pause, when the helpers wait for one (not as they start).
  for (int job = 0; job < 2; ++job) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::mutex mu;
    std::condition_variable all_running;
    int running = 0;
    std::atomic<int> timed_out{0}, unstarted_helper{0};
    team.Run(3, [&](int, int thread) {
      if (thread != 0 && !started) ++unstarted_helper;
      std::unique_lock<std::mutex> lock(mu);
      ++running;
      all_running.notify_all();
      if (!all_running.wait_for(lock, std::chrono::seconds(10),
                                [&] { return running == 3; })) {
        ++timed_out;
      }
    });
    EXPECT_EQ(timed_out.load(), 0) << "job " << job << ": a helper idled";
    EXPECT_EQ(unstarted_helper.load(), 0);
  }
  EXPECT_EQ(team.ChunksByThread(), (std::vector<uint64_t>{2, 2, 2}));
}

TEST(GemmTeamTest, AChunkThatThrowsEndsTheJobAndRunRethrows) {
  GemmTeam team(2);
  std::atomic<int> ran{0};
  // The first chunk claimed throws; the others take 2 ms each, so that
  // running them all would take two threads over 60 ms.
  EXPECT_THROW(
      team.Run(64,
               [&](int chunk, int) {
                 if (chunk == 0) throw std::runtime_error("block 0");
                 std::this_thread::sleep_for(std::chrono::milliseconds(2));
                 ++ran;
               }),
      std::runtime_error);
  // Only chunks claimed before the throw ran (a thread paused for tens of
  // milliseconds could claim several).
  EXPECT_LT(ran.load(), 32);
  // The team goes on: the next job runs every chunk once.
  std::vector<std::atomic<int>> runs(40);
  team.Run(40, [&](int chunk, int) { ++runs[static_cast<size_t>(chunk)]; });
  for (const auto& count : runs) EXPECT_EQ(count.load(), 1);
}

TEST(GemmTeamTest, ASlowThreadLeavesItsShareToTheOthers) {
  GemmTeam team(2);
  // The helper is slowed (as by a shard on its core): each of its chunks
  // takes 20 ms, the caller's none. An even split would give each 20.
  team.Run(40, [](int, int thread) {
    if (thread == 1) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  });
  const std::vector<uint64_t> counts = team.ChunksByThread();
  ASSERT_EQ(counts.size(), 2u);
  EXPECT_EQ(counts[0] + counts[1], 40u);
  EXPECT_GE(counts[0], 35u) << "the helper ran " << counts[1];
}

double ProcessCpuSeconds() {
  timespec now;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) + now.tv_nsec * 1e-9;
}

TEST(GemmTeamTest, IdleHelpersTakeNoCpu) {
  GemmTeam team(3);
  team.Run(12, [](int, int) {});
  const double before = ProcessCpuSeconds();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  // Spinning helpers would burn ~0.6 s of CPU in 0.3 s.
  EXPECT_LT(ProcessCpuSeconds() - before, 0.1);
}

// C = op(A) op(B) (+ C when accumulate), naively, for the references.
void NaiveGemm(bool ta, bool tb, int m, int n, int k, const float* a, int lda,
               const float* b, int ldb, float* c, int ldc) {
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      double sum = 0;
      for (int p = 0; p < k; ++p) {
        sum += double{ta ? a[p * lda + i] : a[i * lda + p]} *
               (tb ? b[j * ldb + p] : b[p * ldb + j]);
      }
      c[i * ldc + j] = static_cast<float>(sum);
    }
  }
}

TEST(GemmSplitTest, SmallGemmsAndOneThreadStayWhole) {
  const GemmSplit one_thread = SplitGemm(4096, 256, 429, 1);
  EXPECT_EQ(one_thread.count, 1);
  EXPECT_EQ(one_thread.size, 4096);
  const GemmSplit small = SplitGemm(64, 64, 64, 8);
  EXPECT_EQ(small.count, 1);
  EXPECT_EQ(small.size, 64);
  const GemmSplit wide = SplitGemm(4096, 1 << 14, 64, 2);  // rows enough
  EXPECT_TRUE(wide.by_rows);
  const GemmSplit thin = SplitGemm(40, 1 << 20, 1, 2);  // 16 wide at least
  EXPECT_FALSE(thin.by_rows);
  EXPECT_LE(thin.count, 2 * kBlocksPerThread);
}

TEST(GemmSplitTest, BlocksTileCAndComputeTheWhole) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> uniform(-1, 1);
  struct Shape {
    int m, n, k;
  };
  for (const Shape& shape :
       {Shape{301, 70, 200}, Shape{70, 301, 200}, Shape{205, 99, 207},
        // 385 columns in blocks of 64 would leave a last block 1 wide.
        Shape{100, 385, 385}}) {
    for (int threads : {2, 3}) {
      const GemmSplit split = SplitGemm(shape.m, shape.n, shape.k, threads);
      ASSERT_GT(split.count, 1) << shape.m << "x" << shape.n;
      EXPECT_LE(split.count, threads * kBlocksPerThread);
      EXPECT_EQ(split.by_rows, shape.m >= shape.n ||
                                   shape.m >= threads * kBlocksPerThread * 16);
      EXPECT_EQ(split.size % 16, 0);
      for (bool ta : {false, true}) {
        for (bool tb : {false, true}) {
          // Padded leading dimensions: a block must use the caller's.
          const int lda = (ta ? shape.m : shape.k) + 3;
          const int ldb = (tb ? shape.k : shape.n) + 5;
          const int ldc = shape.n + 7;
          std::vector<float> a(static_cast<size_t>(ta ? shape.k : shape.m) *
                               lda);
          std::vector<float> b(static_cast<size_t>(tb ? shape.n : shape.k) *
                               ldb);
          for (float& x : a) x = uniform(rng);
          for (float& x : b) x = uniform(rng);
          std::vector<float> whole(static_cast<size_t>(shape.m) * ldc, -9.0f);
          std::vector<float> blocks = whole;
          NaiveGemm(ta, tb, shape.m, shape.n, shape.k, a.data(), lda, b.data(),
                    ldb, whole.data(), ldc);
          int covered = 0;
          for (int index = 0; index < split.count; ++index) {
            const GemmBlock block = GemmBlockOf(split, index, ta, tb, shape.m,
                                                shape.n, lda, ldb, ldc);
            const int width = split.by_rows ? block.m : block.n;
            if (index + 1 < split.count) {
              EXPECT_EQ(width, split.size);
            }
            EXPECT_GE(width, 16)
                << "block " << index << " of " << shape.m << "x" << shape.n;
            covered += split.by_rows ? block.m : block.n;
            NaiveGemm(ta, tb, block.m, block.n, shape.k,
                      a.data() + block.a_offset, lda, b.data() + block.b_offset,
                      ldb, blocks.data() + block.c_offset, ldc);
          }
          EXPECT_EQ(covered, split.by_rows ? shape.m : shape.n);
          ASSERT_EQ(blocks, whole) << shape.m << "x" << shape.n << "x"
                                   << shape.k << " ta " << ta << " tb " << tb;
        }
      }
    }
  }
}

}  // namespace
}  // namespace ps::kernels
