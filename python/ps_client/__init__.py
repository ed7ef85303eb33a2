"""A Python client of the parameter server: admin queries on a cluster's
shards and scoring against ps_serve, over Debian's python3-grpcio and
python3-protobuf.

    import ps_client
    cluster = ps_client.Cluster(["shard0:50051", "shard1:50051"],
                                tls_ca="ca.crt", tls_cert="me.crt",
                                tls_key="me.key", token_file="admin-token")
    for table in cluster.tables():
        print(table.name, table.dim, table.rows)
    serving = ps_client.Serving("serve:50061", tls_ca="ca.crt", ...)
    print(serving.predict(open("test.tsv").readlines()[:100]).tasks)

An export as a TorchScript module for TorchServe or Triton (needs torch,
so it is imported on its own): `python3 -m ps_client.torchscript build`, or
`import ps_client.torchscript`.

The TLS and token options are the binaries' (--tls_ca, --tls_cert,
--tls_key, --tls_server_name, --token_file); without tls_ca the channel is
plaintext, which the servers accept only on loopback unless told otherwise.
"""
from ps_client.channel import ChannelOptions
from ps_client.cluster import Cluster, Table
from ps_client.errors import CallError
from ps_client.routing import NUM_SLOTS, shard_for_slot, slot_for_key
from ps_client.serving import Prediction, Serving

__all__ = ["CallError", "ChannelOptions", "Cluster", "NUM_SLOTS", "Prediction", "Serving",
           "Table", "shard_for_slot", "slot_for_key"]
