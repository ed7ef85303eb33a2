#include "base/optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace ps {
namespace {

// 1 if `value` is NaN or infinite (its exponent bits all ones), else 0.
// OR-ed over an Apply() loop's outputs, with no early exit, it keeps the
// loop vectorized: finite inputs can still overflow, and the caller undoes
// such an update.
inline uint32_t NonFinite(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return static_cast<uint32_t>((bits & 0x7f800000u) == 0x7f800000u);
}

class Sgd final : public Optimizer {
 public:
  explicit Sgd(const OptimizerSpec& spec)
      : learning_rate_(spec.learning_rate()) {}
  int StateFloats(int) const override { return 0; }
  void InitState(int, float*) const override {}
  bool Apply(const float* gradient, int dim, float learning_rate_scale,
             float* weights, float*) const override {
    const float learning_rate = learning_rate_ * learning_rate_scale;
    uint32_t non_finite = 0;
    for (int i = 0; i < dim; ++i) {
      weights[i] -= learning_rate * gradient[i];
      non_finite |= NonFinite(weights[i]);
    }
    return non_finite == 0;
  }

 private:
  const float learning_rate_;
};

// State: the sum of squared gradients per weight.
class Adagrad final : public Optimizer {
 public:
  explicit Adagrad(const OptimizerSpec& spec)
      : learning_rate_(spec.learning_rate()),
        initial_accumulator_(spec.initial_accumulator()),
        epsilon_(spec.epsilon()) {}
  int StateFloats(int dim) const override { return dim; }
  void InitState(int dim, float* state) const override {
    for (int i = 0; i < dim; ++i) state[i] = initial_accumulator_;
  }
  bool Apply(const float* gradient, int dim, float learning_rate_scale,
             float* weights, float* accumulator) const override {
    const float learning_rate = learning_rate_ * learning_rate_scale;
    uint32_t non_finite = 0;
    for (int i = 0; i < dim; ++i) {
      accumulator[i] += gradient[i] * gradient[i];
      weights[i] -=
          learning_rate * gradient[i] / (std::sqrt(accumulator[i]) + epsilon_);
      non_finite |= NonFinite(accumulator[i]) | NonFinite(weights[i]);
    }
    return non_finite == 0;
  }

 private:
  const float learning_rate_;
  const float initial_accumulator_;
  const float epsilon_;
};

// State: first moments (dim), second moments (dim), then beta1^t and beta2^t
// for this row. Keeping the powers per row (rather than a global step) gives
// each sparse row its own bias correction, counted in its own updates.
class Adam final : public Optimizer {
 public:
  explicit Adam(const OptimizerSpec& spec)
      : learning_rate_(spec.learning_rate()),
        beta1_(spec.beta1()),
        beta2_(spec.beta2()),
        epsilon_(spec.epsilon()) {}
  int StateFloats(int dim) const override { return 2 * dim + 2; }
  void InitState(int dim, float* state) const override {
    for (int i = 0; i < 2 * dim; ++i) state[i] = 0.0f;
    state[2 * dim] = 1.0f;
    state[2 * dim + 1] = 1.0f;
  }
  bool Apply(const float* gradient, int dim, float learning_rate_scale,
             float* weights, float* state) const override {
    const float learning_rate = learning_rate_ * learning_rate_scale;
    float* first = state;
    float* second = state + dim;
    float& beta1_power = state[2 * dim];
    float& beta2_power = state[2 * dim + 1];
    beta1_power *= beta1_;
    beta2_power *= beta2_;
    const float first_correction = 1.0f - beta1_power;
    const float second_correction = 1.0f - beta2_power;
    uint32_t non_finite = 0;
    for (int i = 0; i < dim; ++i) {
      first[i] = beta1_ * first[i] + (1.0f - beta1_) * gradient[i];
      second[i] =
          beta2_ * second[i] + (1.0f - beta2_) * gradient[i] * gradient[i];
      const float first_hat = first[i] / first_correction;
      const float second_hat = second[i] / second_correction;
      weights[i] -=
          learning_rate * first_hat / (std::sqrt(second_hat) + epsilon_);
      non_finite |=
          NonFinite(first[i]) | NonFinite(second[i]) | NonFinite(weights[i]);
    }
    return non_finite == 0;
  }

 private:
  const float learning_rate_;
  const float beta1_;
  const float beta2_;
  const float epsilon_;
};

// FTRL-Proximal (McMahan et al., "Ad Click Prediction: a View from the
// Trenches", 2013, Algorithm 1). State: z (dim), then n (dim).
class Ftrl final : public Optimizer {
 public:
  explicit Ftrl(const OptimizerSpec& spec)
      : alpha_(spec.learning_rate()),
        beta_(spec.ftrl_beta()),
        l1_(spec.l1()),
        l2_(spec.l2()) {}
  int StateFloats(int dim) const override { return 2 * dim; }
  void InitState(int dim, float* state) const override {
    for (int i = 0; i < 2 * dim; ++i) state[i] = 0.0f;
  }
  bool Apply(const float* gradient, int dim, float learning_rate_scale,
             float* weights, float* state) const override {
    float* z = state;
    float* n = state + dim;
    uint32_t non_finite = 0;
    for (int i = 0; i < dim; ++i) {
      const float g = gradient[i];
      const float new_n = n[i] + g * g;
      const float sigma = (std::sqrt(new_n) - std::sqrt(n[i])) / alpha_;
      // The scale goes on the gradient's term of z, not on alpha: the
      // weight is rebuilt from z and n, so a scaled alpha would scale the
      // weight itself rather than this step. With l1 = l2 = 0 this moves
      // the weight by scale * alpha * g / (beta + sqrt(n)), and a later
      // unscaled push goes on from there.
      z[i] += learning_rate_scale * g - sigma * weights[i];
      n[i] = new_n;
      if (std::fabs(z[i]) <= l1_) {
        weights[i] = 0.0f;
      } else {
        const float sign = z[i] < 0.0f ? -1.0f : 1.0f;
        weights[i] =
            -(z[i] - sign * l1_) / ((beta_ + std::sqrt(n[i])) / alpha_ + l2_);
      }
      non_finite |= NonFinite(z[i]) | NonFinite(n[i]) | NonFinite(weights[i]);
    }
    return non_finite == 0;
  }

 private:
  const float alpha_;
  const float beta_;
  const float l1_;
  const float l2_;
};

// A row of several groups of columns, each trained by its own optimizer
// on its own slice of the weights and of the state.
class ColumnGroups final : public Optimizer {
 public:
  struct Group {
    int first_column = 0;
    std::unique_ptr<Optimizer> optimizer;
  };
  // `groups` starts at column 0, in increasing first_column.
  explicit ColumnGroups(std::vector<Group> groups)
      : groups_(std::move(groups)) {}

  int StateFloats(int dim) const override {
    int floats = 0;
    for (size_t g = 0; g < groups_.size(); ++g) {
      floats += groups_[g].optimizer->StateFloats(Width(g, dim));
    }
    return floats;
  }
  void InitState(int dim, float* state) const override {
    for (size_t g = 0; g < groups_.size(); ++g) {
      const int width = Width(g, dim);
      groups_[g].optimizer->InitState(width, state);
      state += groups_[g].optimizer->StateFloats(width);
    }
  }
  bool Apply(const float* gradient, int dim, float learning_rate_scale,
             float* weights, float* state) const override {
    bool finite = true;
    for (size_t g = 0; g < groups_.size(); ++g) {
      const int first = groups_[g].first_column;
      const int width = Width(g, dim);
      finite &= groups_[g].optimizer->Apply(
          gradient + first, width, learning_rate_scale, weights + first, state);
      state += groups_[g].optimizer->StateFloats(width);
    }
    return finite;
  }

 private:
  // Columns of group `g` in a row of `dim`; none past the row's end.
  int Width(size_t g, int dim) const {
    const int end = g + 1 < groups_.size() ? groups_[g + 1].first_column : dim;
    return std::max(0, std::min(end, dim) - groups_[g].first_column);
  }

  const std::vector<Group> groups_;
};

float OrDefault(float value, float fallback) {
  return value == 0.0f ? fallback : value;
}

}  // namespace

OptimizerSpec Optimizer::WithDefaults(const OptimizerSpec& spec) {
  OptimizerSpec out = spec;
  for (LaterColumnsOptimizer& group : *out.mutable_later_columns()) {
    *group.mutable_optimizer() = WithDefaults(group.optimizer());
  }
  switch (spec.kind()) {
    case OptimizerSpec::ADAGRAD:
      out.set_learning_rate(OrDefault(spec.learning_rate(), 0.05f));
      out.set_initial_accumulator(OrDefault(spec.initial_accumulator(), 0.1f));
      out.set_epsilon(OrDefault(spec.epsilon(), 1e-10f));
      break;
    case OptimizerSpec::ADAM:
      out.set_learning_rate(OrDefault(spec.learning_rate(), 0.001f));
      out.set_beta1(OrDefault(spec.beta1(), 0.9f));
      out.set_beta2(OrDefault(spec.beta2(), 0.999f));
      out.set_epsilon(OrDefault(spec.epsilon(), 1e-8f));
      break;
    case OptimizerSpec::FTRL:
      out.set_learning_rate(OrDefault(spec.learning_rate(), 0.05f));
      out.set_ftrl_beta(OrDefault(spec.ftrl_beta(), 1.0f));
      break;
    default:
      out.set_learning_rate(OrDefault(spec.learning_rate(), 0.01f));
      break;
  }
  return out;
}

namespace {

// One optimizer of `spec`'s own fields, its later_columns ignored.
absl::StatusOr<std::unique_ptr<Optimizer>> CreateOne(const OptimizerSpec& spec);

}  // namespace

absl::StatusOr<std::unique_ptr<Optimizer>> Optimizer::Create(
    const OptimizerSpec& spec) {
  return Create(spec, std::numeric_limits<int>::max());
}

absl::StatusOr<std::unique_ptr<Optimizer>> Optimizer::Create(
    const OptimizerSpec& raw_spec, int dim) {
  const OptimizerSpec spec = WithDefaults(raw_spec);
  if (spec.later_columns().empty()) return CreateOne(spec);
  std::vector<ColumnGroups::Group> groups(1);
  ASSIGN_OR_RETURN(groups[0].optimizer, CreateOne(spec));
  for (const LaterColumnsOptimizer& later : spec.later_columns()) {
    const int first = static_cast<int>(std::min<uint32_t>(
        later.first_column(), std::numeric_limits<int>::max()));
    if (first <= groups.back().first_column || first >= dim) {
      return absl::InvalidArgumentError(absl::StrCat(
          "an optimizer's later columns from column ", later.first_column(),
          ": each group's first column must be above the one before (",
          groups.back().first_column, ") and below the row's dim",
          dim == std::numeric_limits<int>::max() ? ""
                                                 : absl::StrCat(" ", dim)));
    }
    if (!later.optimizer().later_columns().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("the optimizer of the later columns from column ", first,
                       " has later columns of its own"));
    }
    ColumnGroups::Group group;
    group.first_column = first;
    ASSIGN_OR_RETURN(group.optimizer, CreateOne(later.optimizer()));
    groups.push_back(std::move(group));
  }
  return std::make_unique<ColumnGroups>(std::move(groups));
}

namespace {

absl::StatusOr<std::unique_ptr<Optimizer>> CreateOne(
    const OptimizerSpec& spec) {
  const std::pair<const char*, float> non_negative[] = {
      {"learning_rate", spec.learning_rate()},
      {"initial_accumulator", spec.initial_accumulator()},
      {"epsilon", spec.epsilon()},
      {"ftrl_beta", spec.ftrl_beta()},
      {"l1", spec.l1()},
      {"l2", spec.l2()},
  };
  for (const auto& [name, value] : non_negative) {
    if (!std::isfinite(value) || value < 0.0f) {
      return absl::InvalidArgumentError(absl::StrCat(
          "optimizer ", name, " must be finite and >= 0, got ", value));
    }
  }
  if (spec.kind() == OptimizerSpec::ADAM) {
    for (float beta : {spec.beta1(), spec.beta2()}) {
      if (!(beta >= 0.0f && beta < 1.0f)) {
        return absl::InvalidArgumentError(
            absl::StrCat("Adam betas must be in [0, 1), got ", beta));
      }
    }
  }
  switch (spec.kind()) {
    case OptimizerSpec::SGD:
      return std::make_unique<Sgd>(spec);
    case OptimizerSpec::ADAGRAD:
      return std::make_unique<Adagrad>(spec);
    case OptimizerSpec::ADAM:
      return std::make_unique<Adam>(spec);
    case OptimizerSpec::FTRL:
      return std::make_unique<Ftrl>(spec);
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("unknown optimizer kind ", spec.kind()));
  }
}

}  // namespace

int64_t FirstNonFinite(absl::Span<const float> gradients) {
  // A float is NaN or infinite when its exponent bits are all ones. OR-ing
  // the test over the whole span, with no early exit, vectorizes; the rare
  // failure then looks for the culprit.
  uint32_t any = 0;
  for (float value : gradients) {
    uint32_t bits;
    std::memcpy(&bits, &value, sizeof(bits));
    any |= static_cast<uint32_t>((bits & 0x7f800000u) == 0x7f800000u);
  }
  if (any == 0) return -1;
  for (size_t i = 0; i < gradients.size(); ++i) {
    if (!std::isfinite(gradients[i])) return static_cast<int64_t>(i);
  }
  return -1;
}

namespace {

struct NamedOptimizer {
  const char* name;
  OptimizerSpec::Kind kind;
};
constexpr NamedOptimizer kOptimizers[] = {
    {"sgd", OptimizerSpec::SGD},
    {"adagrad", OptimizerSpec::ADAGRAD},
    {"adam", OptimizerSpec::ADAM},
    {"ftrl", OptimizerSpec::FTRL},
};

}  // namespace

const char* OptimizerName(OptimizerSpec::Kind kind) {
  for (const NamedOptimizer& optimizer : kOptimizers) {
    if (optimizer.kind == kind) return optimizer.name;
  }
  return "unknown";
}

bool OptimizerKindFromName(absl::string_view name, OptimizerSpec::Kind* kind) {
  for (const NamedOptimizer& optimizer : kOptimizers) {
    if (name == optimizer.name) {
      *kind = optimizer.kind;
      return true;
    }
  }
  return false;
}

std::string OptimizerNames(const OptimizerSpec& spec) {
  std::string names = OptimizerName(spec.kind());
  for (const LaterColumnsOptimizer& later : spec.later_columns()) {
    absl::StrAppend(&names, "+", OptimizerName(later.optimizer().kind()), "@",
                    later.first_column());
  }
  return names;
}

}  // namespace ps
