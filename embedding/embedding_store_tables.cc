// EmbeddingStore's tables: declaring, dropping and listing them, their
// specs and optimizers, and their learning rates set live.

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"
#include "base/table_spec.h"
#include "embedding/embedding_store_impl.h"
#include "embedding/embedding_store_internal.h"
#include "glog/logging.h"
#include "google/protobuf/util/message_differencer.h"

namespace ps::embedding {

namespace {

using google::protobuf::util::MessageDifferencer;

// Records the path of each field that differs.
class DifferingFields : public MessageDifferencer::Reporter {
 public:
  using SpecificField = MessageDifferencer::SpecificField;
  void ReportAdded(const google::protobuf::Message&,
                   const google::protobuf::Message&,
                   const std::vector<SpecificField>& path) override {
    Add(path);
  }
  void ReportDeleted(const google::protobuf::Message&,
                     const google::protobuf::Message&,
                     const std::vector<SpecificField>& path) override {
    Add(path);
  }
  void ReportModified(const google::protobuf::Message&,
                      const google::protobuf::Message&,
                      const std::vector<SpecificField>& path) override {
    Add(path);
  }
  std::vector<std::string> paths;

 private:
  void Add(const std::vector<SpecificField>& path) {
    std::string joined;
    for (const SpecificField& field : path) {
      if (field.field == nullptr) continue;
      if (!joined.empty()) joined += ".";
      joined += field.field->name();
    }
    if (std::find(paths.begin(), paths.end(), joined) == paths.end())
      paths.push_back(joined);
  }
};

// What differs between a table's spec and one asked for, shortly: the
// fields, and for the model's spec (text, often long) its first line that
// differs.
std::string SpecDifference(const TableSpec& have, const TableSpec& asked) {
  DifferingFields differing;
  MessageDifferencer differencer;
  differencer.ReportDifferencesTo(&differing);
  differencer.Compare(have, asked);
  std::vector<std::string> described;
  for (const std::string& path : differing.paths) {
    if (path == "model.max_values_per_field") {
      described.push_back(absl::StrCat(
          "the model reads the ", have.model().max_values_per_field(),
          " most recent values of a history, asked for ",
          asked.model().max_values_per_field(),
          ": resume with --max_values_per_field=",
          have.model().max_values_per_field()));
      continue;
    }
    if (path != "model.model_spec") {
      described.push_back(path);
      continue;
    }
    const std::vector<std::string> old_lines =
        absl::StrSplit(have.model().model_spec(), '\n');
    const std::vector<std::string> new_lines =
        absl::StrSplit(asked.model().model_spec(), '\n');
    size_t line = 0;
    while (line < old_lines.size() && line < new_lines.size() &&
           old_lines[line] == new_lines[line]) {
      ++line;
    }
    described.push_back(absl::StrCat(
        "the model spec from line ", line + 1, ": have \"",
        line < old_lines.size() ? old_lines[line] : "", "\", asked for \"",
        line < new_lines.size() ? new_lines[line] : "", "\""));
  }
  return absl::StrJoin(described, "; ");
}

}  // namespace

namespace {

constexpr size_t kMaxTableNameLength = 128;

absl::Status ValidateTableName(absl::string_view name) {
  if (name.empty() || name.size() > kMaxTableNameLength) {
    return absl::InvalidArgumentError(absl::StrCat(
        "table name must have 1 to ", kMaxTableNameLength, " characters"));
  }
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                    (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.';
    if (!ok) {
      return absl::InvalidArgumentError(
          absl::StrCat("table name \"", name,
                       "\" may use only letters, digits, '_', '-' and '.'"));
    }
  }
  // Exports and checkpoints name files after tables: a name is never a
  // path of its own (".", "..") nor climbs out of one.
  if (name[0] == '.' || name[0] == '-' || absl::StrContains(name, "..")) {
    return absl::InvalidArgumentError(
        absl::StrCat("table name \"", name,
                     "\" must not start with '.' or '-' nor hold \"..\""));
  }
  return absl::OkStatus();
}

// What DeclareTable() checks of a spec before it looks at the tables: the
// name, dim and initializer, expiry and admission, and (by building one)
// the optimizer's hyper-parameters.
absl::Status ValidateTableSpec(const TableSpec& spec, uint32_t max_dim) {
  RETURN_IF_ERROR(ValidateTableName(spec.name()));
  if (spec.dim() == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("table ", spec.name(), " needs a dim of at least 1"));
  }
  if (spec.dim() > max_dim) {
    return absl::ResourceExhaustedError(
        absl::StrCat("table ", spec.name(), " has dim ", spec.dim(),
                     ", more than the server's max_dim ", max_dim));
  }
  const int dim = static_cast<int>(spec.dim());
  RETURN_IF_ERROR(Initializer::Check(spec.initializer(), dim));
  if (spec.evict_below_count() > 0 && spec.row_ttl_s() == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "table ", spec.name(),
        " has evict_below_count without row_ttl_s: rows expire only after "
        "row_ttl_s"));
  }
  if (spec.admit_after() > 255) {
    return absl::InvalidArgumentError(
        absl::StrCat("table ", spec.name(), " admits keys after ",
                     spec.admit_after(), " pushes; at most 255"));
  }
  return Optimizer::Create(spec.optimizer(), dim).status();
}

}  // namespace

absl::Status EmbeddingStoreImpl::AddTable(const StoredTable& stored,
                                          bool created_empty) {
  const TableSpec& spec = stored.spec;
  const int dim = static_cast<int>(spec.dim());
  ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> optimizer,
                   Optimizer::Create(spec.optimizer(), dim));
  auto table = std::unique_ptr<Table>(new Table{
      stored.id, spec, dim, dim + optimizer->StateFloats(dim),
      std::move(optimizer), Initializer(spec.initializer()), created_empty});
  table->dropped = stored.dropped;
  table->added_at_s = NowSeconds();
  if (spec.row_ttl_s() > 0 && !stored.dropped) {
    table->expiry.row_floats = table->row_floats;
    table->expiry.ttl_s = spec.row_ttl_s();
    table->expiry.evict_below_count = spec.evict_below_count();
    // A table declared while the store runs expires from now; one found at
    // open, once the log is replayed (StartExpiry()).
    if (opened_) StartTableExpiry(*table);
  }
  if (spec.admit_after() >= 2) {
    table->admission = std::make_unique<AdmissionSketch>(
        options_.admission_sketch_bytes, spec.admit_after());
  }
  table->learning_rate = spec.optimizer().learning_rate();
  if (stored.learning_rate > 0.0f) {
    table->learning_rate_multiplier =
        stored.learning_rate / spec.optimizer().learning_rate();
    table->learning_rate = stored.learning_rate;
  }
  if (!stored.dropped) tables_by_name_[spec.name()] = table.get();
  if (tables_.size() <= stored.id) tables_.resize(stored.id + 1);
  tables_[stored.id] = std::move(table);
  return absl::OkStatus();
}

absl::StatusOr<bool> EmbeddingStoreImpl::DeclareTable(
    const TableSpec& raw_spec) {
  RETURN_IF_ERROR(ValidateTableSpec(raw_spec, options_.max_dim));
  TableSpec spec = raw_spec;
  *spec.mutable_optimizer() = Optimizer::WithDefaults(raw_spec.optimizer());

  absl::MutexLock lock(&tables_mu_);
  auto existing = tables_by_name_.find(spec.name());
  if (existing != tables_by_name_.end()) {
    // A table declared before model cards existed matches one declared
    // with a card, and one declared before cards recorded a seq column's
    // limit one with it (each keeps its spec).
    TableSpec comparable = spec;
    if (!existing->second->spec.has_model()) comparable.clear_model();
    if (SameTableSpec(existing->second->spec, comparable)) {
      return false;
    }
    return absl::AlreadyExistsError(absl::StrCat(
        "table ", spec.name(), " already exists with a different spec (",
        SpecDifference(existing->second->spec, comparable),
        "): a checkpoint or cluster resumes only with the model and tables "
        "it was trained with"));
  }
  StoredTable stored;
  ASSIGN_OR_RETURN(stored.id, rocks_->CreateTable(spec));
  stored.spec = spec;
  RETURN_IF_ERROR(AddTable(stored, /*created_empty=*/true));
  // Before tables_mu_ is let go: no push of the table is fed before it.
  if (ReplicationFeed* feed = feed_.load(); feed != nullptr) {
    FeedEntry entry;
    entry.set_kind(FeedEntry::DECLARE_TABLE);
    entry.set_table(spec.name());
    *entry.mutable_spec() = spec;
    feed->Append(std::move(entry));
  }
  return true;
}

absl::Status EmbeddingStoreImpl::SetLearningRate(absl::string_view table_name,
                                                 float learning_rate) {
  if (!internal::IsPositiveFinite(learning_rate)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a learning rate must be positive and finite, not ", learning_rate));
  }
  absl::MutexLock admin(&admin_mu_);
  ASSIGN_OR_RETURN(const Table* table, FindTable(table_name));
  RETURN_IF_ERROR(rocks_->SetLearningRate(table->spec.name(), learning_rate));
  table->learning_rate_multiplier =
      learning_rate / table->spec.optimizer().learning_rate();
  table->learning_rate = learning_rate;
  if (ReplicationFeed* feed = feed_.load(); feed != nullptr) {
    FeedEntry entry;
    entry.set_kind(FeedEntry::SET_LEARNING_RATE);
    entry.set_table(table->spec.name());
    entry.set_learning_rate(learning_rate);
    feed->Append(std::move(entry));
  }
  LOG(INFO) << "table " << table_name << ": learning rate " << learning_rate
            << " from the next push on (declared "
            << table->spec.optimizer().learning_rate() << ")";
  return absl::OkStatus();
}

absl::Status EmbeddingStoreImpl::DropTable(absl::string_view table_name) {
  absl::MutexLock admin(&admin_mu_);
  ASSIGN_OR_RETURN(const Table* table, FindTable(table_name));
  // No push applies while the table goes: none can write a row of it
  // (or a push-log record naming it) after its rows leave the hot tier.
  absl::WriterMutexLock gate(&push_gate_);
  // On disk first: if that fails, nothing changed.
  RETURN_IF_ERROR(rocks_->RecordDrop(table->id, table->spec));
  {
    absl::MutexLock lock(&tables_mu_);
    tables_by_name_.erase(table->spec.name());
    table->dropped = true;
    // Under tables_mu_: a declare of the name again is fed after it.
    if (ReplicationFeed* feed = feed_.load(); feed != nullptr) {
      FeedEntry entry;
      entry.set_kind(FeedEntry::DROP_TABLE);
      entry.set_table(table->spec.name());
      feed->Append(std::move(entry));
    }
  }
  uint64_t dropped_rows = 0;
  for (auto& stripe : stripes_) {
    absl::MutexLock lock(&stripe->mu);
    // A write-back in flight may hold copies of the table's rows: let it
    // land (in the family, which is still there) before they go.
    AwaitWriteBackLanded(*stripe);
    dropped_rows += stripe->cache.EraseTable(table->id);
  }
  if (absl::Status dropped = rocks_->DropFamily(table->id); !dropped.ok()) {
    // The tombstone stands: the next open drops the family.
    LOG(WARNING) << "table " << table_name
                 << " is dropped, but its files stay until the shard "
                    "restarts: "
                 << dropped;
  }
  LOG(INFO) << "dropped table " << table_name << " (" << dropped_rows
            << " rows were in memory)";
  return absl::OkStatus();
}

absl::StatusOr<TableSpec> EmbeddingStoreImpl::GetTableSpec(
    absl::string_view name) const {
  ASSIGN_OR_RETURN(const Table* table, FindTable(name));
  return table->spec;
}

absl::StatusOr<TableOptimizer> EmbeddingStoreImpl::GetTableOptimizer(
    absl::string_view table_name) const {
  ASSIGN_OR_RETURN(const Table* table, FindTable(table_name));
  TableOptimizer optimizer;
  optimizer.spec = table->spec.optimizer();
  optimizer.learning_rate_multiplier = table->learning_rate_multiplier.load();
  optimizer.state_floats = table->row_floats - table->dim;
  return optimizer;
}

std::vector<TableStats> EmbeddingStoreImpl::ListTables() {
  std::vector<std::pair<TableId, TableStats>> tables;
  {
    absl::ReaderMutexLock lock(&tables_mu_);
    for (const auto& table : tables_) {
      if (table == nullptr || table->dropped) continue;
      TableStats stats;
      stats.spec = table->spec;
      stats.learning_rate = table->learning_rate.load();
      tables.emplace_back(table->id, std::move(stats));
    }
  }
  std::vector<TableStats> stats;
  for (auto& [id, table] : tables) {
    table.estimated_rows = rocks_->EstimatedRows(id);
    table.disk_bytes = rocks_->DiskBytes(id);
    stats.push_back(std::move(table));
  }
  return stats;
}

}  // namespace ps::embedding
