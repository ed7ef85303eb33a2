"""gRPC channels with the binaries' TLS and token options."""
import dataclasses

import grpc


@dataclasses.dataclass(frozen=True)
class ChannelOptions:
    """How to reach a server, as the binaries' flags say it.

    tls_ca: PEM file of the CA that signed the servers' certificates; set,
        the channel speaks TLS (--tls_ca). Empty: plaintext.
    tls_cert, tls_key: PEM client certificate and its key, for servers that
        ask for one (--tls_cert, --tls_key).
    tls_server_name: the name the servers' certificates carry, when it is
        not the host in the address (--tls_server_name).
    token_file: file holding the admin token, sent with every call as
        "authorization: Bearer <token>" (--token_file); calls that change a
        shard need it.
    timeout_s: each call's deadline.
    max_message_mb: the largest answer taken (a big Lookup or stats reply).
    """
    tls_ca: str = ""
    tls_cert: str = ""
    tls_key: str = ""
    tls_server_name: str = ""
    token_file: str = ""
    timeout_s: float = 30.0
    max_message_mb: int = 64

    def __post_init__(self):
        if bool(self.tls_cert) != bool(self.tls_key):
            raise ValueError("tls_cert and tls_key go together")
        if self.tls_cert and not self.tls_ca:
            raise ValueError("tls_cert needs tls_ca (a client certificate is TLS)")
        if self.timeout_s <= 0 or self.max_message_mb <= 0:
            raise ValueError("timeout_s and max_message_mb must be > 0")

    def metadata(self):
        """The call metadata: the token, if any."""
        if not self.token_file:
            return ()
        with open(self.token_file) as f:
            token = f.read().strip()
        if not token:
            raise ValueError(f"token file {self.token_file} is empty")
        return (("authorization", "Bearer " + token),)

    def channel(self, address):
        """A channel to HOST:PORT."""
        limit = self.max_message_mb << 20
        options = [("grpc.max_receive_message_length", limit),
                   ("grpc.max_send_message_length", limit)]
        if self.tls_server_name:
            options.append(("grpc.ssl_target_name_override", self.tls_server_name))
        if not self.tls_ca:
            return grpc.insecure_channel(address, options=options)

        def read(path):
            with open(path, "rb") as f:
                return f.read()
        credentials = grpc.ssl_channel_credentials(
            root_certificates=read(self.tls_ca),
            private_key=read(self.tls_key) if self.tls_key else None,
            certificate_chain=read(self.tls_cert) if self.tls_cert else None)
        return grpc.secure_channel(address, credentials, options=options)
