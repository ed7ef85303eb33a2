// File: tests/test_client.h
//
// Small synchronous helpers over the ps.ParameterServer stub for tests:
// pack keys and gradients, unpack rows.

#ifndef PS_TESTS_TEST_CLIENT_H_
#define PS_TESTS_TEST_CLIENT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "base/packed.h"
#include "grpcpp/client_context.h"
#include "proto/ps.grpc.pb.h"

namespace ps::testing {

inline TableSpec SgdTableSpec(
    const std::string& name, uint32_t dim, float learning_rate,
    InitializerSpec::Kind init = InitializerSpec::UNIFORM) {
  TableSpec spec;
  spec.set_name(name);
  spec.set_dim(dim);
  spec.mutable_initializer()->set_kind(init);
  spec.mutable_initializer()->set_scale(0.05f);
  spec.mutable_initializer()->set_seed(3);
  spec.mutable_optimizer()->set_kind(OptimizerSpec::SGD);
  spec.mutable_optimizer()->set_learning_rate(learning_rate);
  return spec;
}

inline grpc::Status DeclareTable(ParameterServer::Stub& stub,
                                 const TableSpec& spec,
                                 bool* created = nullptr) {
  grpc::ClientContext context;
  DeclareTableRequest request;
  *request.mutable_table() = spec;
  DeclareTableResponse response;
  grpc::Status status = stub.DeclareTable(&context, request, &response);
  if (created != nullptr) *created = response.created();
  return status;
}

inline grpc::Status PullRows(ParameterServer::Stub& stub,
                             const std::string& table,
                             const std::vector<uint64_t>& keys,
                             std::vector<float>* rows) {
  grpc::ClientContext context;
  PullRequest request;
  request.set_table(table);
  request.set_keys(Pack<uint64_t>(keys));
  PullResponse response;
  grpc::Status status = stub.Pull(&context, request, &response);
  if (status.ok()) Unpack(response.values(), rows);
  return status;
}

inline grpc::Status PushRows(ParameterServer::Stub& stub,
                             const std::string& table,
                             const std::vector<uint64_t>& keys,
                             const std::vector<float>& gradients) {
  grpc::ClientContext context;
  PushRequest request;
  request.set_table(table);
  request.set_keys(Pack<uint64_t>(keys));
  request.set_gradients(Pack<float>(gradients));
  PushResponse response;
  return stub.Push(&context, request, &response);
}

}  // namespace ps::testing

#endif  // PS_TESTS_TEST_CLIENT_H_
