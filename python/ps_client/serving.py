"""Scoring and row lookups against ps_serve."""
import dataclasses

import grpc

from ps_client.channel import ChannelOptions
from ps_client.errors import CallError
from ps_client.proto import serving_pb2, serving_pb2_grpc


@dataclasses.dataclass(frozen=True)
class Prediction:
    """One Predict's answer: per task (in the model's order) one probability
    per line, and the export that scored them."""
    tasks: dict
    model_version: str
    model_cut: int

    @property
    def probabilities(self):
        """The first task's probabilities (the only task's, for a model of
        one label)."""
        return next(iter(self.tasks.values()))


def _prediction(answer):
    tasks = {task.task: list(task.probabilities) for task in answer.tasks}
    if not tasks:
        tasks = {"label": list(answer.probabilities)}
    return Prediction(tasks=tasks, model_version=answer.model_version,
                      model_cut=answer.model_cut)


class Serving:
    """A ps_serve at HOST:PORT. Keyword arguments are ChannelOptions' fields
    (tls_ca, tls_cert, tls_key, tls_server_name, timeout_s, ...)."""

    def __init__(self, address, options=None, **option_fields):
        if options is not None and option_fields:
            raise ValueError("pass options or its fields, not both")
        self.address = address
        self.options = options or ChannelOptions(**option_fields)
        self._channel = self.options.channel(address)
        self._stub = serving_pb2_grpc.ServingStub(self._channel)

    def __enter__(self):
        return self

    def __exit__(self, *unused):
        self.close()

    def close(self):
        self._channel.close()

    def _call(self, name, method, request):
        try:
            return method(request, timeout=self.options.timeout_s,
                          metadata=self.options.metadata())
        except grpc.RpcError as error:
            raise CallError(self.address, name, error) from None

    def predict(self, lines):
        """Scores click-log lines in the model's layout (with or without the
        label column)."""
        return _prediction(self._call(
            "Predict", self._stub.Predict,
            serving_pb2.PredictRequest(lines=[line.rstrip("\r\n") for line in lines])))

    def predict_examples(self, examples):
        """Scores examples given as features, not lines (a model that reads
        TFRecord, or features hashed by the caller): each a pair (dense,
        fields), the dense columns' values as a line holds them, in layout
        order, and per categorical field (cat, multi, seq, in order) its
        values' keys, XXH3-64 of the value seeded by the field's index
        (xxhash.xxh3_64_intdigest(value, seed=field)); ps_serve adds the
        crosses."""
        request = serving_pb2.PredictRequest()
        for dense, fields in examples:
            example = request.examples.add()
            example.dense.extend(dense)
            for keys in fields:
                example.fields.add().keys.extend(keys)
        return _prediction(self._call("Predict", self._stub.Predict, request))

    def lookup(self, table, keys):
        """Rows of one of the model's tables: a ps.LookupResponse (values,
        dim floats per key; found per key) and rows(), the values split per
        key."""
        answer = self._call("Lookup", self._stub.Lookup,
                            serving_pb2.LookupRequest(table=table, keys=list(keys)))
        return answer

    @staticmethod
    def rows(answer):
        """A LookupResponse's values, one list of dim floats per key."""
        dim = answer.dim
        return [list(answer.values[i * dim:(i + 1) * dim])
                for i in range(len(answer.found))]
