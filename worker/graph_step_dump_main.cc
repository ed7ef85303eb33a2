// graph_step_dump: one training step of a model spec on the CPU, written as
// JSON for an independent build of the same model to check
// (tests/bench/torch_model.py): the spec, the batch (each task's labels and
// loss scale, raw dense values, each lookup's member rows per example, each
// sequence's mask), random parameters, and
// the step's loss and every gradient (per fetched row of each table, per
// dense tensor).
//
//   graph_step_dump (--model=NAME | --model_spec=FILE) --columns=...
//       --lines=FILE --out=FILE [--seed=N] [--format=csv ...]

#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "base/exit_codes.h"
#include "kernels/backend.h"
#include "model/batch_inputs.h"
#include "model/builtin_specs.h"
#include "model/input/line_parser.h"
#include "model/model_graph.h"
#include "model/model_plan.h"
#include "nlohmann/json.hpp"
#include "worker/input/layout_flags.h"
#include "worker/trainer_flags.h"

// ps_worker's, defined in worker/trainer_flags.cc.
ABSL_DECLARE_FLAG(std::string, model);
ABSL_DECLARE_FLAG(std::string, model_spec);

ABSL_FLAG(std::string, lines, "", "Click-log lines to make the batch of.");
ABSL_FLAG(std::string, out, "", "Where to write the JSON.");
ABSL_FLAG(uint32_t, seed, 1, "Seed of the random parameters.");

namespace {

// A bad flag, spec or input: exit 64 (base/exit_codes.h), as the other
// binaries.
constexpr char kProgram[] = "graph_step_dump";

// The spec --model_spec holds, or the built-in --model names.
absl::StatusOr<ps::model::ModelSpec> SpecFromFlags(
    const ps::model::InputLayout& layout) {
  const std::string path = absl::GetFlag(FLAGS_model_spec);
  if (path.empty()) {
    return ps::worker::BuiltinSpecFromFlags(absl::GetFlag(FLAGS_model), layout);
  }
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  absl::StatusOr<ps::model::ParsedModelSpec> parsed =
      ps::model::ParseModelSpec(text.str());
  if (!parsed.ok()) return parsed.status();
  return parsed->spec;
}

// Random parameters: the tables' rows and every dense tensor, so that no
// weight starts at zero.
void RandomParameters(const ps::model::ModelSpec& spec,
                      const ps::model::ModelPlan& plan,
                      ps::model::BatchInputs* inputs) {
  std::mt19937 rng(absl::GetFlag(FLAGS_seed));
  auto uniform = [&](float scale) {
    return std::uniform_real_distribution<float>(-scale, scale)(rng);
  };
  for (size_t t = 0; t < inputs->tables.size(); ++t) {
    const float scale = std::max(0.05f, spec.table(t).init_scale()) * 4;
    for (float& value : inputs->tables[t].rows) value = uniform(scale);
  }
  for (const auto& tensor : plan.dense_tensors()) {
    std::vector<float> values(tensor.size());
    for (float& value : values)
      value = uniform(tensor.init_scale > 0 ? tensor.init_scale : 0.2f);
    inputs->dense_params.push_back(std::move(values));
  }
}

// The tables' fetched rows, each lookup's member rows per example and the
// dense tensors, into `dump`.
void DumpParameters(const ps::model::ModelSpec& spec,
                    const ps::model::ModelPlan& plan,
                    const ps::model::BatchInputs& inputs,
                    nlohmann::json* dump) {
  for (size_t t = 0; t < inputs.tables.size(); ++t) {
    const auto& table = inputs.tables[t];
    nlohmann::json entry;
    entry["name"] = spec.table(t).name();
    entry["dim"] = table.dim;
    entry["rows"] = std::vector<float>(
        table.rows.begin(), table.rows.begin() + table.keys.size() * table.dim);
    (*dump)["tables"].push_back(entry);
  }
  const int batch = inputs.batch;
  for (size_t l = 0; l < plan.lookups().size(); ++l) {
    const ps::model::Lookup& lookup = plan.lookups()[l];
    const auto& table = inputs.tables[lookup.table];
    nlohmann::json entry;
    entry["table"] = spec.table(lookup.table).name();
    entry["node"] = plan.nodes()[lookup.node].name;
    entry["slot"] = lookup.slot;
    std::vector<std::vector<int32_t>> members;
    for (int b = 0; b < batch; ++b) {
      const int32_t row = inputs.lookup_index[l * batch + b];
      const int32_t fetched = static_cast<int32_t>(table.keys.size());
      if (row < fetched) {
        members.push_back({row});
        continue;
      }
      const size_t pool = row - fetched;
      members.emplace_back(table.members.begin() + table.pool_begin(pool),
                           table.members.begin() + table.pool_end[pool]);
    }
    entry["members"] = members;
    (*dump)["lookups"].push_back(entry);
  }
  for (size_t t = 0; t < plan.dense_tensors().size(); ++t) {
    const auto& tensor = plan.dense_tensors()[t];
    nlohmann::json entry;
    entry["name"] = tensor.name;
    entry["rows"] = tensor.rows;
    entry["cols"] = tensor.cols;
    entry["values"] = inputs.dense_params[t];
    (*dump)["tensors"].push_back(entry);
  }
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  absl::StatusOr<ps::model::InputLayout> layout =
      ps::worker::InputLayoutFromFlags();
  if (!layout.ok()) return ps::FailUsage(kProgram, layout.status().message());
  absl::StatusOr<ps::model::ModelSpec> spec = SpecFromFlags(*layout);
  if (!spec.ok()) return ps::FailUsage(kProgram, spec.status().message());
  // The step sees each table's rows alone, however shards would store them:
  // the rows drawn below are each table's own.
  for (ps::model::Table& table : *spec->mutable_table())
    table.clear_stored_with();
  auto plan = ps::model::PlanForLayout({*spec, {}}, *layout);
  if (!plan.ok()) return ps::FailUsage(kProgram, plan.status().message());
  if (auto fitted = ps::model::LayoutForPlan(*plan, &*layout); !fitted.ok())
    return ps::FailUsage(kProgram, fitted.message());

  std::vector<ps::model::Example> examples;
  std::ifstream lines(absl::GetFlag(FLAGS_lines));
  for (std::string line; std::getline(lines, line);) {
    if (line.empty()) continue;
    examples.emplace_back();
    if (auto parsed = ps::model::ParseLine(line, *layout, &examples.back());
        !parsed.ok()) {
      return ps::FailUsage(
          kProgram, absl::StrCat("a line does not parse: ", parsed.message()));
    }
  }
  ps::model::BatchInputs inputs(&*plan, *layout);
  inputs.Prepare(examples);

  RandomParameters(*spec, *plan, &inputs);
  nlohmann::json dump;
  dump["spec"] = ps::model::ModelSpecText(*spec);
  dump["batch"] = inputs.batch;
  // tasks x batch, task-major; the loss scale likewise, or empty (1).
  dump["labels"] = inputs.labels;
  dump["loss_scale"] = inputs.loss_scale;
  dump["sequence_masks"] = inputs.sequence_masks;
  std::vector<std::vector<double>> dense_raw;
  for (const auto& example : examples) {
    dense_raw.emplace_back(example.dense.begin(), example.dense.end());
  }
  dump["dense_raw"] = dense_raw;
  // Columns of the layout that are dense, in order: a dense group's column
  // c is dense_raw's position of c among them.
  std::vector<int> dense_columns;
  for (size_t c = 0; c < layout->columns.size(); ++c) {
    if (layout->columns[c] == ps::model::ColumnKind::kDense)
      dense_columns.push_back(c);
  }
  dump["dense_columns"] = dense_columns;
  DumpParameters(*spec, *plan, inputs, &dump);
  inputs.PoolRows();
  auto backend = ps::kernels::NewCpuBackend();
  ps::model::ModelGraph graph(&*plan, backend.get());
  ps::model::GraphOutputs outputs;
  if (auto trained = graph.TrainStep(inputs.Inputs(), &outputs); !trained.ok())
    return ps::FailUsage(kProgram, trained.message());
  inputs.FoldPooledGradients(&outputs.table_grads);
  dump["loss"] =
      static_cast<double>(outputs.loss_sum) / std::max(inputs.batch, 1);
  for (size_t t = 0; t < inputs.tables.size(); ++t) {
    dump["tables"][t]["grads"] = outputs.table_grads[t];
  }
  for (size_t t = 0; t < outputs.dense_grads.size(); ++t) {
    dump["tensors"][t]["grads"] = outputs.dense_grads[t];
  }
  std::ofstream out(absl::GetFlag(FLAGS_out));
  out << dump.dump();
  if (!out.good())
    return ps::FailUsage(kProgram, "cannot write " + absl::GetFlag(FLAGS_out));
  return 0;
}
