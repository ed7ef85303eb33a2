// File: embedding/distinct_keys.h
//
// Whether a request names each of its keys once: the question every push
// asks before it may apply its gradients as they are (a repeated key's
// gradients are summed first). A worker's pushes nearly always are
// distinct, so the answer is built for that case and costs a fraction of
// a general hash set's. A function of its argument alone: safe from any
// thread.

#ifndef PS_EMBEDDING_DISTINCT_KEYS_H_
#define PS_EMBEDDING_DISTINCT_KEYS_H_

#include <cstdint>

#include "absl/types/span.h"

namespace ps::embedding {

// True where no key of `keys` appears twice. Keys go into one
// open-addressing table of at least four times as many slots (a
// multiplicative hash, linear probes); keys that crowd it, more than a few
// probes per key on average as chosen keys could make, are answered by a
// flat_hash_set instead, so no input costs much more than that would.
bool AllKeysDistinct(absl::Span<const uint64_t> keys);

}  // namespace ps::embedding

#endif  // PS_EMBEDDING_DISTINCT_KEYS_H_
