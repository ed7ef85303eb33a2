// File: kernels/forwarding_backend.h
//
// A Backend that passes every call to another one (not owned): tests derive
// from it and override the one kernel they break, to see that a check
// catches the bug.

#ifndef PS_KERNELS_FORWARDING_BACKEND_H_
#define PS_KERNELS_FORWARDING_BACKEND_H_

#include <cstddef>
#include <cstdint>

#include "kernels/backend.h"

namespace ps::kernels {

class ForwardingBackend : public Backend {
 public:
  explicit ForwardingBackend(Backend* target) : target_(target) {}

  const char* name() const override { return target_->name(); }
  bool ComputesOnHostMemory() const override {
    return target_->ComputesOnHostMemory();
  }
  Status Allocate(size_t bytes, void** pointer) override {
    return target_->Allocate(bytes, pointer);
  }
  void Free(void* pointer) override { target_->Free(pointer); }
  Status CopyToDevice(void* device, const void* host, size_t bytes) override {
    return target_->CopyToDevice(device, host, bytes);
  }
  Status CopyToIdleDevice(void* device, const void* host,
                          size_t bytes) override {
    return target_->CopyToIdleDevice(device, host, bytes);
  }
  Status CopyToHost(void* host, const void* device, size_t bytes) override {
    return target_->CopyToHost(host, device, bytes);
  }
  Status Fill(float* x, size_t count, float value) override {
    return target_->Fill(x, count, value);
  }
  Status Synchronize() override { return target_->Synchronize(); }
  Status Gemm(bool transpose_a, bool transpose_b, int m, int n, int k,
              float alpha, const float* a, int lda, const float* b, int ldb,
              float beta, float* c, int ldc) override {
    return target_->Gemm(transpose_a, transpose_b, m, n, k, alpha, a, lda, b,
                         ldb, beta, c, ldc);
  }
  void DeclareStableInput(const float* data, size_t count) override {
    target_->DeclareStableInput(data, count);
  }
  void ForgetStableInputs() override { target_->ForgetStableInputs(); }
  Status BiasActivation(float* x, const float* bias, int rows, int cols,
                        bool relu) override {
    return target_->BiasActivation(x, bias, rows, cols, relu);
  }
  Status ReluBackward(const float* y, float* dy, size_t count) override {
    return target_->ReluBackward(y, dy, count);
  }
  Status ColumnSums(const float* x, int rows, int cols, float* sums) override {
    return target_->ColumnSums(x, rows, cols, sums);
  }
  Status CopyColumns(const float* src, int rows, int src_cols, float* dst,
                     int dst_cols, int dst_offset) override {
    return target_->CopyColumns(src, rows, src_cols, dst, dst_cols, dst_offset);
  }
  Status GatherConcat(const float* rows, const int32_t* index, int batch,
                      int fields, int dim, float* out, int out_cols) override {
    return target_->GatherConcat(rows, index, batch, fields, dim, out,
                                 out_cols);
  }
  Status GatherSum(const float* rows, const int32_t* index, int batch,
                   int fields, float* out) override {
    return target_->GatherSum(rows, index, batch, fields, out);
  }
  Status ScatterReduce(const float* in, int in_cols, int field_stride,
                       const int32_t* index, int batch, int fields, int dim,
                       int num_rows, float* row_grads) override {
    return target_->ScatterReduce(in, in_cols, field_stride, index, batch,
                                  fields, dim, num_rows, row_grads);
  }
  Status Add(const float* x, float* y, size_t count) override {
    return target_->Add(x, y, count);
  }
  Status Multiply(const float* a, const float* b, float* c, size_t count,
                  bool accumulate) override {
    return target_->Multiply(a, b, c, count, accumulate);
  }
  Status AccumulateColumns(const float* src, int rows, int src_cols,
                           int src_offset, float* dst, int dst_cols) override {
    return target_->AccumulateColumns(src, rows, src_cols, src_offset, dst,
                                      dst_cols);
  }
  Status ScatterAdd(const float* in, int in_cols, int field_stride,
                    const int32_t* index, int batch, int fields, int dim,
                    float* row_grads) override {
    return target_->ScatterAdd(in, in_cols, field_stride, index, batch, fields,
                               dim, row_grads);
  }
  Status Softmax(const float* x, int rows, int cols, float* y) override {
    return target_->Softmax(x, rows, cols, y);
  }
  Status SoftmaxBackward(const float* y, const float* dy, int rows, int cols,
                         float* dx) override {
    return target_->SoftmaxBackward(y, dy, rows, cols, dx);
  }
  Status DotInteraction(const float* x, int batch, int rows, int dim,
                        bool self_interaction, float* out) override {
    return target_->DotInteraction(x, batch, rows, dim, self_interaction, out);
  }
  Status DotInteractionBackward(const float* x, const float* dout, int batch,
                                int rows, int dim, bool self_interaction,
                                float* dx) override {
    return target_->DotInteractionBackward(x, dout, batch, rows, dim,
                                           self_interaction, dx);
  }
  Status FmForward(const float* x, int x_cols, int batch, int fields, int dim,
                   float* logits) override {
    return target_->FmForward(x, x_cols, batch, fields, dim, logits);
  }
  Status FmBackward(const float* x, const float* dlogits, int x_cols, int batch,
                    int fields, int dim, float* dx) override {
    return target_->FmBackward(x, dlogits, x_cols, batch, fields, dim, dx);
  }
  Status SigmoidCrossEntropy(const float* logits, const float* labels,
                             const float* scale, int batch,
                             float* probabilities, float* dlogits,
                             float* loss_sum) override {
    return target_->SigmoidCrossEntropy(logits, labels, scale, batch,
                                        probabilities, dlogits, loss_sum);
  }

 private:
  Backend* const target_;
};

}  // namespace ps::kernels

#endif  // PS_KERNELS_FORWARDING_BACKEND_H_
