"""The one error the client raises for a failed call."""
import grpc


class CallError(Exception):
    """A call a server refused or could not answer: which server, which
    call, the gRPC status code (a grpc.StatusCode) and the server's message.
    """

    def __init__(self, server, call, error):
        self.server = server
        self.call = call
        self.code = error.code() if isinstance(error, grpc.RpcError) else None
        self.details = error.details() if isinstance(error, grpc.RpcError) else str(error)
        name = self.code.name if self.code is not None else "ERROR"
        super().__init__(f"{call} on {server}: {name}: {self.details}")
