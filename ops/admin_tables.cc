#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "base/exit_codes.h"
#include "base/latency_quantile.h"
#include "base/manifest.h"
#include "base/optimizer.h"
#include "base/routing.h"
#include "grpcpp/client_context.h"
#include "ops/admin_command.h"
#include "ops/checkpoint.h"
#include "proto/admin.grpc.pb.h"

namespace ps::ops {

// `tables`: every table with its rows and bytes added up over the shards.
int Tables(const Cluster& cluster) {
  struct Total {
    ps::TableSpec spec;
    float learning_rate = 0;
    bool mixed_rates = false;
    uint64_t rows = 0, disk_bytes = 0;
    int shards = 0;
  };
  std::vector<Total> totals;
  std::vector<ShardAnswer> answers;
  for (size_t i = 0; i < cluster.servers.size(); ++i) {
    const std::string& server = cluster.servers[i];
    ps::ListTablesResponse response;
    ShardAnswer answer(server);
    answer.status = cluster.channels->shard(i).ListTables(
        cluster.Context().get(), ps::ListTablesRequest(), &response);
    Json tables = Json::array();
    for (const ps::TableInfo& table : response.tables()) {
      auto total = std::find_if(totals.begin(), totals.end(), [&](auto& t) {
        return t.spec.name() == table.spec().name();
      });
      if (total == totals.end()) {
        totals.push_back(Total{table.spec(), table.learning_rate()});
        total = totals.end() - 1;
      }
      total->mixed_rates |= total->learning_rate != table.learning_rate();
      total->rows += table.estimated_rows();
      total->disk_bytes += table.disk_bytes();
      ++total->shards;
      tables.push_back(Json{{"name", table.spec().name()},
                            {"rows", table.estimated_rows()},
                            {"disk_bytes", table.disk_bytes()},
                            {"learning_rate", Decimal(table.learning_rate())}});
    }
    answer.fields = {{"tables", std::move(tables)}};
    answers.push_back(std::move(answer));
  }
  if (cluster.options.json) {
    Json tables = Json::array();
    for (const Total& total : totals) {
      tables.push_back(
          Json{{"name", total.spec.name()},
               {"dim", total.spec.dim()},
               {"optimizer", ps::OptimizerNames(total.spec.optimizer())},
               {"learning_rate", total.mixed_rates
                                     ? Json(nullptr)
                                     : Json(Decimal(total.learning_rate))},
               {"declared_learning_rate",
                Decimal(total.spec.optimizer().learning_rate())},
               {"rows", total.rows},
               {"disk_bytes", total.disk_bytes},
               {"shards", total.shards}});
    }
    std::printf("%s\n", Dump({{"tables", std::move(tables)},
                              {"shards", ShardAnswersJson(answers)}})
                            .c_str());
  } else {
    std::printf("%-40s %6s %-8s %10s %14s %14s %7s\n", "table", "dim",
                "optimizer", "lr", "rows (est.)", "disk bytes", "shards");
    for (const Total& total : totals) {
      std::printf(
          "%-40s %6u %-8s %10s %14llu %14llu %7d\n", total.spec.name().c_str(),
          total.spec.dim(), ps::OptimizerNames(total.spec.optimizer()).c_str(),
          total.mixed_rates ? "mixed"
                            : absl::StrCat(total.learning_rate).c_str(),
          static_cast<unsigned long long>(total.rows),
          static_cast<unsigned long long>(total.disk_bytes), total.shards);
    }
  }
  return ReportFailures("tables", answers);
}

// `row`: one row, from the shard that owns its key (with --read_replicas,
// from that shard's replica, by the replicas' slot maps).
int Row(const Cluster& cluster) {
  const uint64_t key = cluster.options.key;
  absl::StatusOr<SlotMap> map = ReadSlotMap(cluster);
  if (!map.ok()) return Fail(map.status());
  if (!cluster.options.read_replicas.empty() &&
      cluster.servers.size() != map->num_shards()) {
    return Fail(absl::StrCat("--read_replicas names ", cluster.servers.size(),
                             " replicas for ", map->num_shards(),
                             " shards: give one per shard, in shard order"));
  }
  const size_t owner = map->ShardForKey(key);
  if (owner >= cluster.servers.size()) {
    return Fail(absl::FailedPreconditionError(absl::StrCat(
        "key ", key, " belongs to shard ", owner, " by slot map epoch ",
        map->epoch(), ", which --servers does not name")));
  }
  const std::string& server = cluster.servers[owner];
  ps::GetRowRequest request;
  request.set_table(cluster.options.table);
  request.set_key(key);
  request.set_optimizer_state(true);
  ps::GetRowResponse response;
  ShardAnswer answer(server);
  answer.status = cluster.channels->shard(owner).GetRow(cluster.Context().get(),
                                                        request, &response);
  auto floats = [](const auto& values) {
    Json numbers = Json::array();
    for (float value : values) numbers.push_back(Decimal(value));
    return numbers;
  };
  if (answer.status.ok()) {
    if (cluster.options.json) {
      std::printf(
          "%s\n",
          Dump({{"server", server},
                {"table", request.table()},
                {"key", key},
                {"stored", response.stored()},
                {"values", floats(response.values())},
                {"optimizer_state", floats(response.optimizer_state())}})
              .c_str());
    } else {
      std::printf("%s [%s]\n",
                  response.stored() ? "stored" : "initial value (never pushed)",
                  absl::StrJoin(response.values(), ", ").c_str());
      if (response.optimizer_state_size() > 0) {
        std::printf("optimizer state [%s]\n",
                    absl::StrJoin(response.optimizer_state(), ", ").c_str());
      }
    }
  }
  return ReportFailures("row", {answer});
}

// `set-lr`: a table's learning rate on every shard, live.
int SetLearningRate(const Cluster& cluster) {
  ps::SetLearningRateRequest request;
  request.set_table(cluster.options.table);
  request.set_learning_rate(static_cast<float>(cluster.options.learning_rate));
  return OnEveryShard(
      cluster, "set-lr",
      [&](ps::Admin::Stub& admin, Json* fields) {
        ps::SetLearningRateResponse response;
        grpc::Status status =
            admin.SetLearningRate(cluster.Context().get(), request, &response);
        *fields = {{"learning_rate", Decimal(request.learning_rate())},
                   {"previous_learning_rate",
                    Decimal(response.previous_learning_rate())}};
        return status;
      },
      [&](const Json& fields) {
        return absl::StrCat("learning rate of ", request.table(), " is ",
                            Dump(fields["learning_rate"]), " (was ",
                            Dump(fields["previous_learning_rate"]),
                            ") from the next push on");
      });
}

// `drop-table`: a table and its rows on every shard; refused while workers
// hold leases unless --force.
int DropTable(const Cluster& cluster) {
  ps::DropTableRequest request;
  request.set_table(cluster.options.table);
  request.set_force(cluster.options.force);
  if (!request.force()) {
    // Only the shard the workers coordinate through knows their leases:
    // ask every shard (and --coordinator) before any drops anything, or
    // under --etcd the one elected (the others answer UNAVAILABLE).
    std::vector<std::pair<std::string, ps::Admin::Stub*>> asked;
    for (size_t i = 0; i < cluster.servers.size(); ++i) {
      if (!cluster.coordinator_elected)
        asked.emplace_back(cluster.servers[i], &cluster.channels->shard(i));
    }
    if (cluster.coordinator_elected ||
        std::find(cluster.servers.begin(), cluster.servers.end(),
                  cluster.coordinator) == cluster.servers.end()) {
      asked.emplace_back(cluster.coordinator, &cluster.channels->coordinator());
    }
    std::vector<std::string> live;
    for (const auto& [server, stub] : asked) {
      ps::WorkerClocksResponse clocks;
      const grpc::Status status = stub->WorkerClocks(
          cluster.Context().get(), ps::WorkerClocksRequest(), &clocks);
      if (!status.ok()) {
        return Fail(absl::UnavailableError(absl::StrCat(
            "cannot ask ", server, " whether workers are training (",
            status.error_message(),
            "); nothing was dropped (--force drops without asking)")));
      }
      for (const auto& worker : clocks.workers()) {
        if (worker.live())
          live.push_back(absl::StrCat(worker.worker(), " (on ", server, ")"));
      }
    }
    if (!live.empty()) {
      return Fail(absl::FailedPreconditionError(absl::StrCat(
          "worker(s) ", absl::StrJoin(live, ", "),
          " hold leases and may be training ", request.table(),
          ": nothing was dropped; stop them first, or add --force")));
    }
  }
  // A shard without the table has nothing to drop: running the command
  // again after a shard failed finishes the job.
  int held = 0;  // the shards that had the table
  const int code = OnEveryShard(
      cluster, "drop-table",
      [&](ps::Admin::Stub& admin, Json* fields) {
        ps::DropTableResponse response;
        grpc::Status status =
            admin.DropTable(cluster.Context().get(), request, &response);
        const bool absent = status.error_code() == grpc::StatusCode::NOT_FOUND;
        held += status.ok();
        *fields = {{"table", request.table()}, {"dropped", status.ok()}};
        return absent ? grpc::Status::OK : status;
      },
      [&](const Json& fields) {
        return fields["dropped"] == true
                   ? absl::StrCat("dropped ", request.table())
                   : absl::StrCat("has no table ", request.table());
      });
  if (code == 0 && held == 0) {
    return Fail(absl::NotFoundError(
        absl::StrCat("no shard has a table named ", request.table())));
  }
  return code;
}

// `expire`: a table's expired rows dropped now on every shard.
int Expire(const Cluster& cluster) {
  ps::ExpireTableRequest request;
  request.set_table(cluster.options.table);
  return OnEveryShard(
      cluster, "expire",
      [&](ps::Admin::Stub& admin, Json* fields) {
        ps::ExpireTableResponse response;
        // A compaction of a big table takes minutes.
        grpc::Status status = admin.ExpireTable(
            cluster.Context(absl::Hours(1)).get(), request, &response);
        *fields = {{"rows_in_memory", response.rows_in_memory()},
                   {"rows_on_disk", response.rows_on_disk()}};
        return status;
      },
      [&](const Json& fields) {
        return absl::StrCat(request.table(), ": ",
                            Dump(fields["rows_in_memory"]),
                            " expired rows dropped from memory, ",
                            Dump(fields["rows_on_disk"]), " from disk");
      });
}

}  // namespace ps::ops
