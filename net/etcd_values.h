// File: net/etcd_values.h
//
// etcd's data model as the project sees it: a key with its revisions and
// lease, a compare-and-swap's further condition, where a cluster's store
// stands, and one change a watch saw. Plain values, no gRPC: the
// coordination interface (cluster/coordination_store.h) and its in-memory
// implementation use them without linking a client.

#ifndef PS_NET_ETCD_VALUES_H_
#define PS_NET_ETCD_VALUES_H_

#include <cstdint>
#include <string>

namespace ps::net {

// A key as etcd holds it.
struct EtcdValue {
  std::string key;
  std::string value;
  // The revisions that created and last changed the key.
  int64_t create_revision = 0;
  int64_t mod_revision = 0;
  // Its lease (0: none).
  int64_t lease = 0;
};

// A further condition of a compare-and-swap (EtcdClient::PutIf()): `key`'s
// mod revision is `mod_revision` (0: the key does not exist).
struct EtcdCondition {
  std::string key;
  int64_t mod_revision = 0;
};

// Which etcd cluster answered, and its store's revision then: a revision
// only grows in one cluster, so a lower one (or another cluster) means etcd
// lost its state or was restored from an older snapshot.
struct EtcdPosition {
  uint64_t cluster_id = 0;
  int64_t revision = 0;
};

// One change seen by a watch.
struct EtcdEvent {
  enum class Type { kPut, kDelete };
  Type type = Type::kPut;
  // After the change (a delete: the key and the revision that deleted it).
  EtcdValue kv;
};

}  // namespace ps::net

#endif  // PS_NET_ETCD_VALUES_H_
