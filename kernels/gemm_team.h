// File: kernels/gemm_team.h
//
// How the CPU backend shares a large GEMM among threads. SplitGemm() cuts
// C into blocks of rows (or columns); each block is an independent GEMM on
// slices of the operands (GemmBlockOf()), so a block computes the same sums
// as the whole GEMM for those elements (oneDNN may pick another kernel for
// a block's shape, so the last bits of a sum can differ from one thread's).
//
// GemmTeam runs the chunks of one job (the blocks of a GEMM) on the
// calling thread and helper threads of its own. Each chunk goes to whichever
// thread is free first, so that a thread slowed by other work on its core
// (a shard beside the worker, the worker's own pipeline) takes fewer chunks
// rather than holding up the rest, as an evenly split OpenMP team would.
// Idle helpers block (no spinning): they take no CPU from their core's
// other work between jobs.
//
// Standard C++ only (kernels/ also builds with plain nvcc). Run() is called
// by one thread at a time.

#ifndef PS_KERNELS_GEMM_TEAM_H_
#define PS_KERNELS_GEMM_TEAM_H_

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace ps::kernels {

// A GEMM below this many multiply-adds runs whole on the caller: waking the
// team would cost more than it saves.
inline constexpr int64_t kSplitMultiplyAdds = int64_t{1} << 22;
// Blocks per team thread: enough that a thread slowed by other work on its
// core leaves most of its share to the others.
inline constexpr int kBlocksPerThread = 4;

// How C (m x n) is cut for `threads` threads: into `count` blocks of `size`
// rows (by_rows: when m >= n, or m has 16 rows for each of the
// threads * kBlocksPerThread blocks) or columns, the last one taking what
// is left: shorter, or up to 15 longer rather than a block under 16 of its
// own (a GEMM one column wide runs oneDNN's GEMV, slow and summing in
// another order). Every block but the last is a multiple of 16 (whole
// vector registers).
// One block, the whole of C, for one thread or a GEMM below
// kSplitMultiplyAdds.
struct GemmSplit {
  bool by_rows = true;
  int size = 0;
  int count = 1;
};
GemmSplit SplitGemm(int m, int n, int k, int threads);

// Block `index` of `split`, for C = op(A) op(B) with the given transposes
// and leading dimensions: its rows and columns, and where its A, B and C
// start, in elements from the operands' starts.
struct GemmBlock {
  int m = 0;
  int n = 0;
  size_t a_offset = 0;
  size_t b_offset = 0;
  size_t c_offset = 0;
};
GemmBlock GemmBlockOf(const GemmSplit& split, int index, bool transpose_a,
                      bool transpose_b, int m, int n, int lda, int ldb,
                      int ldc);

class GemmTeam {
 public:
  // The caller and `threads` - 1 helpers, each running `start_thread` (if
  // set) before its first chunk. Throws std::system_error, with no helper
  // left running, if a thread cannot be started. REQUIRES: threads >= 1.
  explicit GemmTeam(int threads,
                    const std::function<void()>& start_thread = {});
  ~GemmTeam();
  GemmTeam(const GemmTeam&) = delete;
  GemmTeam& operator=(const GemmTeam&) = delete;

  // What Run() calls: the chunk, and the thread running it (0 for the
  // caller, 1 to threads() - 1 for the helpers), for per-thread scratch.
  using ChunkFunction = std::function<void(int chunk, int thread)>;

  // Calls run_chunk(i, thread) once for each i in [0, chunks), on the
  // caller and the helpers; returns once every call has returned. If a call
  // throws, no further chunk starts, and Run() rethrows the first exception
  // once the calls under way have returned.
  void Run(int chunks, const ChunkFunction& run_chunk);

  int threads() const { return static_cast<int>(helpers_.size()) + 1; }

  // Chunks each thread ran to completion, by thread (the caller first),
  // since creation.
  std::vector<uint64_t> ChunksByThread() const;

 private:
  void HelperLoop(int index);
  // Claims and runs chunks of the current job on `thread` until none is
  // left; returns how many it finished. A chunk that throws ends the job:
  // the exception is kept in error_, and the chunks not yet claimed count
  // as finished (never run).
  int RunChunks(const ChunkFunction& run_chunk, int chunks, int thread);

  mutable std::mutex mu_;
  std::condition_variable job_posted_;
  std::condition_variable job_done_;
  // The job in progress (null between jobs), its chunk count and generation.
  const ChunkFunction* job_ = nullptr;
  int chunks_ = 0;
  uint64_t generation_ = 0;
  // Chunks finished, and helpers still inside the job.
  int finished_ = 0;
  int helpers_inside_ = 0;
  bool stopping_ = false;
  // The first exception a chunk of the current job threw.
  std::exception_ptr error_;
  std::atomic<int> next_chunk_{0};
  std::vector<std::atomic<uint64_t>> chunks_by_thread_;
  std::vector<std::thread> helpers_;
};

}  // namespace ps::kernels

#endif  // PS_KERNELS_GEMM_TEAM_H_
