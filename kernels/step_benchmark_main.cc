// step_benchmark: examples/s of one full training step of a CTR model on a
// backend, with the step's inputs (rows pulled from the servers, dense
// parameters) in host memory as the worker has them, and gradients copied
// back to the host. No network: this measures the backend.
//
//   step_benchmark [--cuda] [--tf32] [--bf16] [--model=wide_deep]
//   [--batch=4096]
//   [--steps=50]
//
// Prints one line: backend=... model=... batch=... examples_per_sec=...

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/ctr_model.h"
#include "kernels/cuda_backend.h"
#include "kernels/random_step.h"

int main(int argc, char** argv) {
  using namespace ps::kernels;
  bool cuda = false, tf32 = false, bf16 = false;
  int batch = 4096, steps = 50;
  std::string model = "wide_deep";
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--cuda")
      cuda = true;
    else if (arg == "--tf32")
      tf32 = true;
    else if (arg == "--bf16")
      bf16 = true;
    else if (arg.rfind("--batch=", 0) == 0)
      batch = std::stoi(arg.substr(8));
    else if (arg.rfind("--steps=", 0) == 0)
      steps = std::stoi(arg.substr(8));
    else if (arg.rfind("--model=", 0) == 0)
      model = arg.substr(8);
    else {
      std::fprintf(stderr, "unknown flag %s\n", arg.c_str());
      return 2;
    }
  }
  ModelConfig config;  // 26 fields, 13 dense, dim 16, hidden 256,128
  if (!ModelKindFromName(model, &config.kind)) {
    std::fprintf(stderr, "--model must be lr, wide_deep or deepfm, not %s\n",
                 model.c_str());
    return 2;
  }
  std::unique_ptr<Backend> backend;
  Status created;
  if (cuda) {
    CudaOptions options;
    options.precision = tf32 ? GemmPrecision::kTf32 : GemmPrecision::kFp32;
    created = NewCudaBackend(options, &backend);
  } else {
    CpuOptions options;
    options.precision = bf16 ? GemmPrecision::kBf16 : GemmPrecision::kFp32;
    created = NewCpuBackend(options, &backend);
  }
  if (!created.ok()) {
    std::fprintf(stderr, "%s\n", created.message().c_str());
    return 2;
  }
  // A batch's unique keys: about a third of its (example, field) slots, as
  // on long-tailed click logs.
  const RandomStep random(config, batch, batch * config.fields / 3, 7);
  const StepInputs in = random.Inputs();

  CtrModel step(config, backend.get());
  StepOutputs out;
  for (int warm = 0; warm < 3; ++warm) {
    Status status = step.TrainStep(in, &out);
    if (!status.ok()) {
      std::fprintf(stderr, "%s\n", status.message().c_str());
      return 1;
    }
  }
  const auto start = std::chrono::steady_clock::now();
  for (int s = 0; s < steps; ++s) {
    Status status = step.TrainStep(in, &out);
    if (!status.ok()) {
      std::fprintf(stderr, "step %d: %s\n", s, status.message().c_str());
      return 1;
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  std::printf(
      "backend=%s%s model=%s batch=%d examples_per_sec=%.0f loss=%.4f\n",
      backend->name(), tf32 ? "-tf32" : (bf16 ? "-bf16" : ""), model.c_str(),
      batch, batch * steps / seconds, out.loss_sum / batch);
  return 0;
}
