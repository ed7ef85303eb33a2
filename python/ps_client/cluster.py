"""Admin queries on a cluster's shards: what ps_admin stats, tables, slots
and row print, as Python values."""
import dataclasses

import grpc

from ps_client.channel import ChannelOptions
from ps_client.errors import CallError
from ps_client.proto import admin_pb2, admin_pb2_grpc, ps_pb2, ps_pb2_grpc
from ps_client.routing import shard_for_slot, slot_for_key


@dataclasses.dataclass(frozen=True)
class Table:
    """One table over the whole cluster: its spec (a ps.TableSpec, as
    declared), the rows and disk bytes summed over its shards, and the
    learning rate pushes use now."""
    spec: object
    rows: int
    disk_bytes: int
    learning_rate: float

    @property
    def name(self):
        return self.spec.name

    @property
    def dim(self):
        return self.spec.dim


class Cluster:
    """The shards of one job, addressed as ps_admin's --servers: shard i at
    servers[i]. Keyword arguments are ChannelOptions' fields (tls_ca,
    tls_cert, tls_key, tls_server_name, token_file, timeout_s, ...), or pass
    `options`. Use as a context manager, or call close()."""

    def __init__(self, servers, options=None, **option_fields):
        if isinstance(servers, str):
            servers = [s for s in servers.split(",") if s]
        if not servers:
            raise ValueError("no servers")
        if options is not None and option_fields:
            raise ValueError("pass options or its fields, not both")
        self.servers = list(servers)
        self.options = options or ChannelOptions(**option_fields)
        self._channels = [self.options.channel(s) for s in self.servers]
        self._admin = [admin_pb2_grpc.AdminStub(c) for c in self._channels]
        self._data = [ps_pb2_grpc.ParameterServerStub(c) for c in self._channels]

    def __enter__(self):
        return self

    def __exit__(self, *unused):
        self.close()

    def close(self):
        for channel in self._channels:
            channel.close()

    def _call(self, shard, name, method, request):
        try:
            return method(request, timeout=self.options.timeout_s,
                          metadata=self.options.metadata())
        except grpc.RpcError as error:
            raise CallError(f"shard {shard} ({self.servers[shard]})", name, error) from None

    def stats(self):
        """Each shard's ps.ShardStatsResponse, in shard order: requests,
        rows pulled and pushed, the hot tier, RocksDB, the push log,
        replication, per-method latencies, the build."""
        return [self._call(i, "ShardStats", admin.ShardStats, admin_pb2.ShardStatsRequest())
                for i, admin in enumerate(self._admin)]

    def tables(self):
        """Every table, by name: its spec and the rows and bytes of all its
        shards (ps_admin tables)."""
        by_name = {}
        for i, admin in enumerate(self._admin):
            listed = self._call(i, "ListTables", admin.ListTables,
                                admin_pb2.ListTablesRequest())
            for info in listed.tables:
                seen = by_name.get(info.spec.name)
                by_name[info.spec.name] = Table(
                    spec=info.spec,
                    rows=info.estimated_rows + (seen.rows if seen else 0),
                    disk_bytes=info.disk_bytes + (seen.disk_bytes if seen else 0),
                    learning_rate=info.learning_rate)
        return [by_name[name] for name in sorted(by_name)]

    def slot_map(self):
        """The job's slot map (a ps.SlotMapSpec): the newest epoch any shard
        routes by."""
        maps = [self._call(i, "GetSlotMap", data.GetSlotMap,
                           ps_pb2.GetSlotMapRequest()).slot_map
                for i, data in enumerate(self._data)]
        return max(maps, key=lambda spec: spec.epoch)

    def shard_for_key(self, key, slot_map=None):
        """The shard that owns a 64-bit key now."""
        return shard_for_slot(slot_map or self.slot_map(), slot_for_key(key))

    def row(self, table, key, optimizer_state=False):
        """One row (a ps.GetRowResponse: values, stored, and with
        optimizer_state the optimizer's floats), from the shard that owns
        the key (ps_admin row)."""
        shard = self.shard_for_key(key)
        if shard >= len(self._admin):
            raise ValueError(f"key {key} belongs to shard {shard}, but only "
                             f"{len(self.servers)} servers were given")
        return self._call(shard, "GetRow", self._admin[shard].GetRow,
                          admin_pb2.GetRowRequest(table=table, key=key,
                                                  optimizer_state=optimizer_state))

    def set_learning_rate(self, table, learning_rate):
        """Sets a table's learning rate on every shard, from the next push on
        (ps_admin set-lr; needs the admin token). Returns the rate each shard
        used before, in shard order."""
        if not learning_rate > 0:
            raise ValueError(f"learning rate {learning_rate} is not positive")
        request = admin_pb2.SetLearningRateRequest(table=table, learning_rate=learning_rate)
        return [self._call(i, "SetLearningRate", admin.SetLearningRate,
                           request).previous_learning_rate
                for i, admin in enumerate(self._admin)]
