// ps_export_dump: writes an export (ps_admin export) as plain arrays for a
// model built outside this code (python/ps_client/torchscript.py builds a
// TorchScript module from them): DIR/model.json says what the model is and
// how it reads an example, and each table's rows and each dense tensor are
// raw little-endian files beside it. A delta's chain is applied, as
// ps_predict reads it.
//
// model.json:
//   spec      the model spec (protobuf's JSON, field names as in the proto)
//   layout    the click-log layout: columns (kinds in file order),
//             delimiter, header, multi_separator, key_fields (per field, the
//             field whose id seeds its keys), crosses, label_names,
//             max_values_per_field (the most keys of a multi field or a
//             cross), max_sequence_values (the most recent values a seq
//             field keeps), tfrecord, feature_names
//   nodes     the plan's nodes in order (name, kind, index, slots, width,
//             inputs, table, row_dim, rows)
//   lookups   per lookup: table, node, slot, and where its keys are in an
//             example (example_slot, dense_column, pooling, max_length,
//             position; missing_key for a sequence's position,
//             bucket_keys for a bucketized column)
//   tasks     name and output node of each task
//   sequences per sequence node: node, example_slot, missing_key
//   dense_groups per dense node: node, columns (among the dense columns)
//   tables    name, dim, initializer (kind, scale, seed), rows, keys_file
//             (uint64 per row), rows_file (dim float32 per row)
//   tensors   name, rows, cols, file (rows x cols float32, row-major)
// Keys are written as decimal strings (JSON numbers are doubles).

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/build_info.h"
#include "base/exit_codes.h"
#include "base/lock_mode.h"
#include "glog/logging.h"
#include "google/protobuf/util/json_util.h"
#include "model/batch_inputs.h"
#include "model/exported_model.h"
#include "model/input/features.h"
#include "model/input/input_layout.h"

ABSL_FLAG(std::string, export, "",
          "The export to write out (ps_admin export --dir). Required.");
ABSL_FLAG(std::string, out, "",
          "The directory to write model.json and the arrays into (created; "
          "files there of the same names are replaced). Required.");
ABSL_FLAG(int64_t, max_mb, 4096,
          "The most MiB of rows and keys to write (8 bytes of key and 4 per "
          "float of each row), counted over what the exports store (a "
          "delta's chain counts the rows it replaced too): a larger model is "
          "refused before any row is read.");

namespace {

constexpr char kProgram[] = "ps_export_dump";

std::string Quote(absl::string_view text) {
  std::string quoted = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') {
      quoted.push_back('\\');
      quoted.push_back(c);
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof(escaped), "\\u%04x", c);
      quoted += escaped;
    } else {
      quoted.push_back(c);
    }
  }
  quoted.push_back('"');
  return quoted;
}

std::string KeyText(uint64_t key) { return Quote(absl::StrCat(key)); }

template <typename T>
std::string IntList(const std::vector<T>& values) {
  return absl::StrCat("[", absl::StrJoin(values, ","), "]");
}

absl::string_view NodeKindName(ps::model::PlanNode::Kind kind) {
  using Kind = ps::model::PlanNode::Kind;
  switch (kind) {
    case Kind::kField:
      return "field";
    case Kind::kCross:
      return "cross";
    case Kind::kDense:
      return "dense";
    case Kind::kBucketizedDense:
      return "bucketized";
    case Kind::kSequence:
      return "sequence";
    case Kind::kLayer:
      return "layer";
  }
  return "layer";
}

std::string LayoutJson(const ps::model::InputLayout& layout) {
  std::vector<std::string> columns, key_fields, crosses, labels, features;
  for (ps::model::ColumnKind kind : layout.columns)
    columns.push_back(Quote(ps::model::ColumnKindName(kind)));
  for (int field = 0; field < layout.fields(); ++field)
    key_fields.push_back(absl::StrCat(layout.KeyField(field)));
  for (const auto& [first, second] : layout.crosses)
    crosses.push_back(absl::StrCat("[", first, ",", second, "]"));
  for (const std::string& name : layout.label_names)
    labels.push_back(Quote(name));
  for (const std::string& name : layout.feature_names)
    features.push_back(Quote(name));
  return absl::StrCat(
      "{\"columns\":[", absl::StrJoin(columns, ","),
      "],\"delimiter\":", Quote(std::string(1, layout.delimiter)),
      ",\"header\":", layout.header ? "true" : "false",
      ",\"multi_separator\":", Quote(std::string(1, layout.multi_separator)),
      ",\"key_fields\":[", absl::StrJoin(key_fields, ","), "],\"crosses\":[",
      absl::StrJoin(crosses, ","), "],\"label_names\":[",
      absl::StrJoin(labels, ","),
      "],\"max_values_per_field\":", layout.max_values_per_field,
      ",\"max_sequence_values\":", layout.max_sequence_values,
      ",\"tfrecord\":", layout.tfrecord ? "true" : "false",
      ",\"feature_names\":[", absl::StrJoin(features, ","), "]}");
}

std::string NodesJson(const ps::model::ModelPlan& plan) {
  std::vector<std::string> nodes;
  for (const ps::model::PlanNode& node : plan.nodes()) {
    nodes.push_back(absl::StrCat(
        "{\"name\":", Quote(node.name),
        ",\"kind\":", Quote(NodeKindName(node.kind)), ",\"index\":", node.index,
        ",\"slots\":", node.slots, ",\"width\":", node.width,
        ",\"inputs\":", IntList(node.inputs), ",\"table\":", node.table,
        ",\"row_dim\":", node.row_dim, ",\"rows\":", node.rows, "}"));
  }
  return absl::StrCat("[", absl::StrJoin(nodes, ","), "]");
}

std::string LookupsJson(const ps::model::ModelPlan& plan,
                        const ps::model::BatchInputs& inputs) {
  std::vector<std::string> lookups;
  const ps::model::ModelSpec& spec = plan.spec();
  for (size_t l = 0; l < plan.lookups().size(); ++l) {
    const ps::model::Lookup& lookup = plan.lookups()[l];
    const ps::model::BatchInputs::LookupSource& source =
        inputs.lookup_sources()[l];
    std::string text = absl::StrCat(
        "{\"table\":", lookup.table, ",\"node\":", lookup.node,
        ",\"slot\":", lookup.slot, ",\"example_slot\":", source.example_slot,
        ",\"dense_column\":", source.dense_column,
        ",\"pooling\":", Quote(ps::model::Field::Pooling_Name(source.pooling)),
        ",\"max_length\":", source.max_length,
        ",\"position\":", source.position);
    if (source.position >= 0) {
      // A sequence's position: the key standing where an example has no item.
      absl::StrAppend(&text, ",\"missing_key\":",
                      KeyText(ps::model::FeatureKey(source.field_id, "")));
    }
    if (source.example_slot < 0) {
      // A bucketized column: one key per bucket, below the first boundary
      // to above the last.
      const ps::model::DenseInput& group =
          spec.dense(plan.nodes()[lookup.node].index);
      std::vector<std::string> keys;
      for (int bucket = 0; bucket <= group.boundaries_size(); ++bucket) {
        keys.push_back(KeyText(ps::model::BucketKey(
            static_cast<uint32_t>(source.dense_column), bucket)));
      }
      absl::StrAppend(&text, ",\"bucket_keys\":[", absl::StrJoin(keys, ","),
                      "]");
    }
    text.push_back('}');
    lookups.push_back(std::move(text));
  }
  return absl::StrCat("[", absl::StrJoin(lookups, ","), "]");
}

absl::Status WriteFile(const std::string& path, const void* data,
                       size_t bytes) {
  std::FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr) {
    return absl::InternalError(
        absl::StrCat("cannot write ", path, ": ", std::strerror(errno)));
  }
  const bool written = std::fwrite(data, 1, bytes, file) == bytes;
  const int error = errno;
  if (std::fclose(file) != 0 || !written) {
    return absl::InternalError(absl::StrCat(
        "cannot write ", path, ": ", std::strerror(written ? errno : error)));
  }
  return absl::OkStatus();
}

absl::Status Dump(ps::model::ExportedModel& model, const std::string& out,
                  uint64_t max_bytes) {
  const ps::model::ModelPlan& plan = model.plan();
  ps::model::BatchInputs inputs(&plan, model.layout());
  std::string spec_json;
  google::protobuf::util::JsonPrintOptions json_options;
  json_options.preserve_proto_field_names = true;
  json_options.always_print_primitive_fields = true;
  if (!google::protobuf::util::MessageToJsonString(plan.spec(), &spec_json,
                                                   json_options)
           .ok()) {
    return absl::InternalError("the model spec does not print as JSON");
  }
  // Refused before anything is read when even what the exports store is
  // more (a delta's chain counts rows it replaced too).
  uint64_t stored_bytes = 0;
  for (int t = 0; t < plan.spec().table_size(); ++t) {
    stored_bytes +=
        model.stored_rows(t) *
        (sizeof(uint64_t) + model.table_spec(t).dim() * sizeof(float));
  }
  if (stored_bytes > max_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the model's rows take more than --max_mb=", max_bytes >> 20,
        " MiB: its exports store ", stored_bytes >> 20,
        " MiB of keys and rows"));
  }
  std::vector<std::string> tables;
  std::vector<uint64_t> keys;
  std::vector<float> rows;
  for (int t = 0; t < plan.spec().table_size(); ++t) {
    if (absl::Status read = model.ReadTable(t, &keys, &rows); !read.ok())
      return read;
    const std::string keys_file = absl::StrCat("table", t, ".keys");
    const std::string rows_file = absl::StrCat("table", t, ".rows");
    if (absl::Status written = WriteFile(out + "/" + keys_file, keys.data(),
                                         keys.size() * sizeof(uint64_t));
        !written.ok()) {
      return written;
    }
    if (absl::Status written = WriteFile(out + "/" + rows_file, rows.data(),
                                         rows.size() * sizeof(float));
        !written.ok()) {
      return written;
    }
    const ps::TableSpec& table = model.table_spec(t);
    tables.push_back(absl::StrCat(
        "{\"name\":", Quote(plan.spec().table(t).name()),
        ",\"dim\":", table.dim(), ",\"initializer\":{\"kind\":",
        Quote(ps::InitializerSpec::Kind_Name(table.initializer().kind())),
        ",\"scale\":", absl::StrFormat("%.9g", table.initializer().scale()),
        ",\"seed\":", KeyText(table.initializer().seed()),
        "},\"rows\":", keys.size(), ",\"keys_file\":", Quote(keys_file),
        ",\"rows_file\":", Quote(rows_file), "}"));
  }
  std::vector<std::string> tensors;
  for (size_t t = 0; t < plan.dense_tensors().size(); ++t) {
    const auto& tensor = plan.dense_tensors()[t];
    const std::string file = absl::StrCat("tensor", t, ".floats");
    if (absl::Status written =
            WriteFile(out + "/" + file, model.dense_tensor(t).data(),
                      tensor.size() * sizeof(float));
        !written.ok()) {
      return written;
    }
    tensors.push_back(absl::StrCat(
        "{\"name\":", Quote(tensor.name), ",\"rows\":", tensor.rows,
        ",\"cols\":", tensor.cols, ",\"file\":", Quote(file), "}"));
  }
  std::vector<std::string> tasks, sequences, groups;
  for (const ps::model::PlanTask& task : plan.tasks()) {
    tasks.push_back(absl::StrCat("{\"name\":", Quote(task.name),
                                 ",\"output\":", task.output, "}"));
  }
  for (size_t q = 0; q < plan.sequence_nodes().size(); ++q) {
    sequences.push_back(absl::StrCat(
        "{\"node\":", plan.sequence_nodes()[q],
        ",\"example_slot\":", inputs.sequence_slots()[q], ",\"missing_key\":",
        KeyText(ps::model::FeatureKey(inputs.sequence_key_fields()[q], "")),
        "}"));
  }
  for (size_t g = 0; g < plan.dense_nodes().size(); ++g) {
    groups.push_back(
        absl::StrCat("{\"node\":", plan.dense_nodes()[g],
                     ",\"columns\":", IntList(inputs.dense_columns()[g]), "}"));
  }
  const std::string json = absl::StrCat(
      "{\"spec\":", spec_json, ",\n\"layout\":", LayoutJson(model.layout()),
      ",\n\"nodes\":", NodesJson(plan),
      ",\n\"lookups\":", LookupsJson(plan, inputs), ",\n\"tasks\":[",
      absl::StrJoin(tasks, ","), "],\n\"sequences\":[",
      absl::StrJoin(sequences, ","), "],\n\"dense_groups\":[",
      absl::StrJoin(groups, ","), "],\n\"tables\":[",
      absl::StrJoin(tables, ","), "],\n\"tensors\":[",
      absl::StrJoin(tensors, ","), "]}\n");
  return WriteFile(out + "/model.json", json.data(), json.size());
}

}  // namespace

int main(int argc, char** argv) {
  ps::UseReleaseLocks();
  absl::SetProgramUsageMessage(
      "Writes an export as plain arrays and a model.json (for a TorchScript "
      "module: python3 -m ps_client.torchscript).\n\nExample:\n  "
      "ps_export_dump --export=/exports/wide_deep --out=/tmp/wide_deep");
  ps::SetVersionFlag("ps_export_dump", {});
  absl::ParseCommandLine(argc, argv);
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);
  const std::string export_dir = absl::GetFlag(FLAGS_export);
  const std::string out = absl::GetFlag(FLAGS_out);
  if (export_dir.empty())
    return ps::FailUsage(kProgram, "--export is required");
  if (out.empty()) return ps::FailUsage(kProgram, "--out is required");
  const int64_t max_mb = absl::GetFlag(FLAGS_max_mb);
  if (max_mb < 1 || max_mb > (int64_t{1} << 30))
    return ps::FailUsage(kProgram, "--max_mb must be in [1, 2^30]");
  ps::model::ExportedModelOptions options;
  options.max_memory_bytes = 0;  // each table is read whole once, here
  auto model = ps::model::ExportedModel::Open(export_dir, options);
  if (!model.ok()) return ps::FailWith(kProgram, model.status());
  std::error_code error;
  std::filesystem::create_directories(out, error);
  if (error) {
    return ps::FailWith(
        kProgram, absl::InternalError(absl::StrCat("cannot create ", out, ": ",
                                                   error.message())));
  }
  if (absl::Status dumped =
          Dump(**model, out, static_cast<uint64_t>(max_mb) << 20);
      !dumped.ok()) {
    return ps::FailWith(kProgram, dumped);
  }
  std::printf("wrote %s/model.json and the model's arrays\n", out.c_str());
  return 0;
}
