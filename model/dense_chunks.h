// File: model/dense_chunks.h
//
// How a model's dense tensor is stored on the shards: as a table whose rows
// are chunks of the tensor's floats, keyed 0, 1, 2, ..., which routing
// spreads over the shards like any key. The trainer pulls and pushes them;
// an export's reader reads them back whole.

#ifndef PS_MODEL_DENSE_CHUNKS_H_
#define PS_MODEL_DENSE_CHUNKS_H_

#include <cstdint>
#include <vector>

#include "kernels/ctr_model.h"

namespace ps::model {

// The floats in one row of a dense tensor's table (the tensor's size when it
// is smaller than `chunk`), and the rows it takes.
int DenseChunkFloats(const kernels::DenseTensorSpec& tensor, int chunk);
int DenseChunks(const kernels::DenseTensorSpec& tensor, int chunk);
// The keys of those rows: 0, 1, ..., chunks - 1.
std::vector<uint64_t> DenseChunkKeys(int chunks);

}  // namespace ps::model

#endif  // PS_MODEL_DENSE_CHUNKS_H_
