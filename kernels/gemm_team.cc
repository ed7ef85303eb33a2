#include "kernels/gemm_team.h"

#include <algorithm>

namespace ps::kernels {

GemmSplit SplitGemm(int m, int n, int k, int threads) {
  GemmSplit split;
  // Rows whenever there are enough for every block: a block of rows keeps
  // C's rows whole, which oneDNN's fast bfloat16 kernels want.
  split.by_rows =
      m >= n || int64_t{m} >= int64_t{threads} * kBlocksPerThread * 16;
  const int extent = split.by_rows ? m : n;
  split.size = extent;
  if (threads <= 1 || int64_t{m} * n * k < kSplitMultiplyAdds) return split;
  const int wanted =
      std::max(1, std::min(threads * kBlocksPerThread, extent / 16));
  split.size = ((extent + wanted - 1) / wanted + 15) / 16 * 16;
  split.count = (extent + split.size - 1) / split.size;
  const int last = extent - (split.count - 1) * split.size;
  if (split.count > 1 && last < 16) --split.count;
  return split;
}

GemmBlock GemmBlockOf(const GemmSplit& split, int index, bool transpose_a,
                      bool transpose_b, int m, int n, int lda, int ldb,
                      int ldc) {
  const size_t first = static_cast<size_t>(index) * split.size;
  const int rest = (split.by_rows ? m : n) - static_cast<int>(first);
  const int size = index + 1 == split.count ? rest : split.size;
  GemmBlock block;
  if (split.by_rows) {
    // Rows of op(A): rows of A, or its columns when transposed.
    block.m = size;
    block.n = n;
    block.a_offset = transpose_a ? first : first * lda;
    block.c_offset = first * ldc;
  } else {
    // Columns of op(B): columns of B, or its rows when transposed.
    block.m = m;
    block.n = size;
    block.b_offset = transpose_b ? first * ldb : first;
    block.c_offset = first;
  }
  return block;
}

GemmTeam::GemmTeam(int threads, const std::function<void()>& start_thread)
    : chunks_by_thread_(static_cast<size_t>(threads < 1 ? 1 : threads)) {
  try {
    for (int index = 1; index < threads; ++index) {
      helpers_.emplace_back([this, index, start_thread] {
        if (start_thread) start_thread();
        HelperLoop(index);
      });
    }
  } catch (...) {
    // The destructor does not run for a constructor that throws: stop the
    // helpers started so far here.
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    job_posted_.notify_all();
    for (std::thread& helper : helpers_) helper.join();
    throw;
  }
}

GemmTeam::~GemmTeam() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  job_posted_.notify_all();
  for (std::thread& helper : helpers_) helper.join();
}

int GemmTeam::RunChunks(const ChunkFunction& run_chunk, int chunks,
                        int thread) {
  int finished = 0;
  for (int chunk = next_chunk_.fetch_add(1); chunk < chunks;
       chunk = next_chunk_.fetch_add(1)) {
    ++finished;
    try {
      run_chunk(chunk, thread);
      ++chunks_by_thread_[static_cast<size_t>(thread)];
    } catch (...) {
      // The chunks no thread has claimed yet will not run: they count as
      // finished here, so that the job still ends.
      finished += std::max(0, chunks - next_chunk_.exchange(chunks));
      std::lock_guard<std::mutex> lock(mu_);
      if (!error_) error_ = std::current_exception();
      return finished;
    }
  }
  return finished;
}

void GemmTeam::Run(int chunks, const ChunkFunction& run_chunk) {
  if (chunks <= 0) return;
  if (helpers_.empty() || chunks == 1) {
    for (int chunk = 0; chunk < chunks; ++chunk) {
      run_chunk(chunk, 0);
      ++chunks_by_thread_[0];
    }
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &run_chunk;
    chunks_ = chunks;
    finished_ = 0;
    next_chunk_.store(0);
    ++generation_;
  }
  job_posted_.notify_all();
  const int ran = RunChunks(run_chunk, chunks, 0);
  std::unique_lock<std::mutex> lock(mu_);
  finished_ += ran;
  // Every chunk done, and no helper still between claiming and counting.
  job_done_.wait(lock,
                 [&] { return finished_ == chunks_ && helpers_inside_ == 0; });
  job_ = nullptr;
  if (error_) {
    std::exception_ptr error = std::move(error_);
    error_ = nullptr;
    std::rethrow_exception(error);
  }
}

void GemmTeam::HelperLoop(int index) {
  uint64_t seen = 0;
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    job_posted_.wait(lock, [&] {
      return stopping_ || (job_ != nullptr && generation_ != seen);
    });
    if (stopping_) return;
    seen = generation_;
    const ChunkFunction* job = job_;
    const int chunks = chunks_;
    ++helpers_inside_;
    lock.unlock();
    const int ran = RunChunks(*job, chunks, index);
    lock.lock();
    finished_ += ran;
    --helpers_inside_;
    if (finished_ == chunks_ && helpers_inside_ == 0) job_done_.notify_one();
  }
}

std::vector<uint64_t> GemmTeam::ChunksByThread() const {
  std::vector<uint64_t> counts;
  for (const auto& count : chunks_by_thread_) counts.push_back(count.load());
  return counts;
}

}  // namespace ps::kernels
