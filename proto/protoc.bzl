"""Generates C++ from .proto files with the system protoc and grpc_cpp_plugin.

Debian's protoc 3.21 and gRPC 1.51 plugin match the headers the code links
against; Bazel's own proto rules would fetch a protobuf source tree.
"""

def _stem(src):
    return src[:-len(".proto")]

def cc_proto_messages(name, src, deps = []):
    """cc_library `name` with the message classes of proto/<src>."""
    stem = _stem(src)
    native.genrule(
        name = name + "_gen",
        srcs = [src] + [d + "_srcs" for d in deps],
        outs = [stem + ".pb.h", stem + ".pb.cc"],
        cmd = "protoc -I. --cpp_out=$(GENDIR) $(location %s)" % src,
    )
    native.filegroup(name = name + "_srcs", srcs = [src] + [d + "_srcs" for d in deps])
    native.cc_library(
        name = name,
        srcs = [stem + ".pb.cc"],
        hdrs = [stem + ".pb.h"],
        deps = deps + ["@system//:protobuf"],
    )

def cc_proto_services(name, src, deps = [], visibility = None):
    """cc_library `name` with the gRPC service stubs of proto/<src>."""
    stem = _stem(src)
    native.genrule(
        name = name + "_gen",
        srcs = [src] + [d + "_srcs" for d in deps],
        outs = [stem + ".grpc.pb.h", stem + ".grpc.pb.cc"],
        cmd = ("protoc -I. --plugin=protoc-gen-grpc=$$(which grpc_cpp_plugin) " +
               "--grpc_out=$(GENDIR) $(location %s)") % src,
    )
    native.cc_library(
        name = name,
        srcs = [stem + ".grpc.pb.cc"],
        hdrs = [stem + ".grpc.pb.h"],
        deps = deps + ["@system//:grpc"],
        visibility = visibility,
    )
