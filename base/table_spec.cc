#include "base/table_spec.h"

#include "google/protobuf/util/message_differencer.h"

namespace ps {

bool SameTableSpec(const TableSpec& a, const TableSpec& b) {
  if (a.has_model() && b.has_model() &&
      (a.model().max_values_per_field() == 0) !=
          (b.model().max_values_per_field() == 0)) {
    TableSpec unrecorded = b;
    unrecorded.mutable_model()->clear_max_values_per_field();
    TableSpec other = a;
    other.mutable_model()->clear_max_values_per_field();
    return google::protobuf::util::MessageDifferencer::Equals(other,
                                                              unrecorded);
  }
  return google::protobuf::util::MessageDifferencer::Equals(a, b);
}

}  // namespace ps
