// File: base/table_spec.h
//
// Whether two TableSpecs (proto/ps.proto) declare the same table, for the
// places that must agree on it: a shard taking a declaration of a table it
// holds, and a checkpoint comparing the shards' tables.

#ifndef PS_BASE_TABLE_SPEC_H_
#define PS_BASE_TABLE_SPEC_H_

#include "proto/ps.pb.h"

namespace ps {

// True when `a` and `b` are equal, except that a model card which does not
// record max_values_per_field (written before cards recorded it) matches
// one that does, whatever its value.
bool SameTableSpec(const TableSpec& a, const TableSpec& b);

}  // namespace ps

#endif  // PS_BASE_TABLE_SPEC_H_
