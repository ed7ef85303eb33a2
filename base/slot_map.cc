#include "base/slot_map.h"

#include <algorithm>

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/util/json_util.h"

namespace ps {

SlotMap SlotMap::Initial(uint32_t num_shards) {
  std::vector<uint32_t> owners(kNumSlots);
  for (uint32_t slot = 0; slot < kNumSlots; ++slot)
    owners[slot] = slot % num_shards;
  return SlotMap(1, num_shards, std::move(owners));
}

absl::StatusOr<SlotMap> SlotMap::FromSpec(const SlotMapSpec& spec,
                                          uint32_t num_shards_if_unset) {
  if (spec.epoch() == 0) {
    return absl::InvalidArgumentError("a slot map's epoch starts at 1, not 0");
  }
  std::vector<uint32_t> owners(kNumSlots);
  uint32_t next = 0;
  for (const SlotMapSpec::Range& range : spec.ranges()) {
    if (range.first() != next || range.last() < range.first() ||
        range.last() >= kNumSlots) {
      return absl::InvalidArgumentError(absl::StrCat(
          "slot map epoch ", spec.epoch(), ": range ", range.first(), "-",
          range.last(), " of shard ", range.shard(), " does not start at slot ",
          next, " or ends past slot ", kNumSlots - 1,
          " (ranges must cover every slot once, in order)"));
    }
    std::fill(owners.begin() + range.first(), owners.begin() + range.last() + 1,
              range.shard());
    next = range.last() + 1;
  }
  if (next != kNumSlots) {
    return absl::InvalidArgumentError(
        absl::StrCat("slot map epoch ", spec.epoch(), " leaves slots ", next,
                     "-", kNumSlots - 1, " without a shard"));
  }
  const uint32_t highest = *std::max_element(owners.begin(), owners.end());
  uint32_t num_shards =
      spec.num_shards() != 0 ? spec.num_shards() : num_shards_if_unset;
  if (num_shards == 0) num_shards = highest + 1;
  if (highest >= num_shards) {
    return absl::InvalidArgumentError(
        absl::StrCat("slot map epoch ", spec.epoch(), " gives slots to shard ",
                     highest, ", but names ", num_shards, " shards"));
  }
  return SlotMap(spec.epoch(), num_shards, std::move(owners));
}

SlotMapSpec SlotMap::ToSpec() const {
  SlotMapSpec spec;
  spec.set_epoch(epoch_);
  spec.set_num_shards(num_shards_);
  uint32_t first = 0;
  for (uint32_t slot = 1; slot <= kNumSlots; ++slot) {
    if (slot < kNumSlots && owners_[slot] == owners_[first]) continue;
    SlotMapSpec::Range* range = spec.add_ranges();
    range->set_first(first);
    range->set_last(slot - 1);
    range->set_shard(owners_[first]);
    first = slot;
  }
  return spec;
}

uint32_t SlotMap::HighestShard() const {
  return *std::max_element(owners_.begin(), owners_.end());
}

std::string SlotMapToJson(const SlotMap& map) {
  std::string json;
  google::protobuf::util::JsonPrintOptions print;
  print.preserve_proto_field_names = true;
  // A SlotMapSpec always converts.
  (void)google::protobuf::util::MessageToJsonString(map.ToSpec(), &json, print);
  return json;
}

absl::StatusOr<SlotMap> SlotMapFromJson(absl::string_view json,
                                        uint32_t num_shards_if_unset) {
  SlotMapSpec spec;
  // Fields a newer binary added do not make the map unreadable.
  google::protobuf::util::JsonParseOptions parse;
  parse.ignore_unknown_fields = true;
  if (!google::protobuf::util::JsonStringToMessage(
           google::protobuf::StringPiece(json.data(), json.size()), &spec,
           parse)
           .ok()) {
    return absl::InvalidArgumentError("not a slot map (protobuf JSON)");
  }
  return SlotMap::FromSpec(spec, num_shards_if_unset);
}

SlotMap SlotMap::WithNumShards(uint32_t num_shards) const {
  return SlotMap(epoch_ + 1, num_shards, owners_);
}

SlotMap SlotMap::WithSlotsMoved(uint32_t first, uint32_t last,
                                uint32_t shard) const {
  std::vector<uint32_t> owners = owners_;
  std::fill(owners.begin() + first, owners.begin() + last + 1, shard);
  return SlotMap(epoch_ + 1, num_shards_, std::move(owners));
}

SlotMap SlotMap::WithSlotsMovedFrom(uint32_t first, uint32_t last,
                                    uint32_t from, uint32_t to) const {
  std::vector<uint32_t> owners = owners_;
  for (uint32_t slot = first; slot <= last; ++slot) {
    if (owners[slot] == from) owners[slot] = to;
  }
  return SlotMap(epoch_ + 1, num_shards_, std::move(owners));
}

uint32_t SlotMap::SlotsOwned(uint32_t first, uint32_t last,
                             uint32_t shard) const {
  return static_cast<uint32_t>(
      std::count(owners_.begin() + first, owners_.begin() + last + 1, shard));
}

std::vector<std::pair<uint32_t, uint32_t>> SlotMap::RangesOf(
    uint32_t shard) const {
  std::vector<std::pair<uint32_t, uint32_t>> ranges;
  for (uint32_t slot = 0; slot < kNumSlots; ++slot) {
    if (owners_[slot] != shard) continue;
    if (!ranges.empty() && ranges.back().second + 1 == slot) {
      ranges.back().second = slot;
    } else {
      ranges.emplace_back(slot, slot);
    }
  }
  return ranges;
}

std::string FormatSlotRanges(
    const std::vector<std::pair<uint32_t, uint32_t>>& ranges) {
  return absl::StrJoin(
      ranges, ",",
      [](std::string* out, const std::pair<uint32_t, uint32_t>& r) {
        if (r.first == r.second) {
          absl::StrAppend(out, r.first);
        } else {
          absl::StrAppend(out, r.first, "-", r.second);
        }
      });
}

absl::Status SlotMovedError(absl::string_view message, uint64_t epoch) {
  absl::Status status = absl::FailedPreconditionError(message);
  status.SetPayload(kMovedPayload, absl::Cord(absl::StrCat(epoch)));
  return status;
}

std::optional<uint64_t> MovedEpoch(const absl::Status& status) {
  const auto payload = status.GetPayload(kMovedPayload);
  uint64_t epoch = 0;
  if (!payload.has_value() ||
      !absl::SimpleAtoi(std::string(*payload), &epoch)) {
    return std::nullopt;
  }
  return epoch;
}

}  // namespace ps
