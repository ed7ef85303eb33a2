"""Re-exports Bazel 4's native C++ rules under rules_cc's names.

Debian's bazel-rules-cc loads `use_cpp_toolchain`, which Bazel 4.2.3 lacks, so
@bazel_tools//tools/cpp is satisfied by this offline stand-in instead.
"""

cc_binary = native.cc_binary
cc_import = native.cc_import
cc_library = native.cc_library
cc_proto_library = native.cc_proto_library
cc_test = native.cc_test
cc_toolchain = native.cc_toolchain
cc_toolchain_suite = native.cc_toolchain_suite
fdo_prefetch_hints = native.fdo_prefetch_hints
fdo_profile = native.fdo_profile
objc_library = native.objc_library
