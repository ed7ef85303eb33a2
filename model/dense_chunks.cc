#include "model/dense_chunks.h"

#include <algorithm>

namespace ps::model {

int DenseChunkFloats(const kernels::DenseTensorSpec& tensor, int chunk) {
  return static_cast<int>(std::min<size_t>(tensor.size(), chunk));
}

int DenseChunks(const kernels::DenseTensorSpec& tensor, int chunk) {
  const int floats = DenseChunkFloats(tensor, chunk);
  return static_cast<int>((tensor.size() + floats - 1) / floats);
}

std::vector<uint64_t> DenseChunkKeys(int chunks) {
  std::vector<uint64_t> keys(chunks);
  for (int c = 0; c < chunks; ++c) keys[c] = c;
  return keys;
}

}  // namespace ps::model
