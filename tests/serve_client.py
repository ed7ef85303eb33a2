#!/usr/bin/python3
"""An independent client of ps_serve: Python's grpcio (Debian's), with the
messages of proto/serving.proto generated here by protoc.

    serve_client.py ADDRESS PROTO_DIR LINES_FILE COUNT [cut|tasks]

Sends the first COUNT lines of LINES_FILE in one Predict and prints the
model version (with `cut`: the version and the model's cut), then one
probability per line (%.9g). With `tasks`: a line of the model's task
names, then per line each task's probability, tab-separated (no version).
"""
import os
import subprocess
import sys
import tempfile

import grpc


def main(address, proto_dir, lines_file, count, with_cut=""):
    out = tempfile.mkdtemp()
    subprocess.run(["protoc", "-I", proto_dir, "--python_out=" + out,
                    os.path.join(proto_dir, "serving.proto")], check=True)
    sys.path.insert(0, out)
    import serving_pb2  # noqa: E402 (generated above)

    with open(lines_file) as f:
        lines = [line.rstrip("\n") for _, line in zip(range(int(count)), f)]
    with grpc.insecure_channel(address) as channel:
        predict = channel.unary_unary(
            "/ps.Serving/Predict",
            request_serializer=serving_pb2.PredictRequest.SerializeToString,
            response_deserializer=serving_pb2.PredictResponse.FromString)
        response = predict(serving_pb2.PredictRequest(lines=lines), timeout=30)
    if with_cut == "tasks":
        print("\t".join(task.task for task in response.tasks))
        for i in range(len(lines)):
            print("\t".join("%.9g" % task.probabilities[i]
                            for task in response.tasks))
        return
    if with_cut == "cut":
        print(response.model_version, response.model_cut)
    else:
        print(response.model_version)
    for probability in response.probabilities:
        print("%.9g" % probability)


if __name__ == "__main__":
    main(*sys.argv[1:])
