"""Repository rule that finds the CUDA toolkit, if there is one.

Writes @local_cuda//:defs.bzl with CUDA_AVAILABLE and NVCC, so the same
WORKSPACE builds CUDA objects where nvcc exists and a CPU-only tree elsewhere.
A toolkit is not a GPU: whether one is present is decided at run time.
"""

_CANDIDATES = ["/usr/local/cuda/bin/nvcc"]

def _cuda_configure_impl(repository_ctx):
    nvcc = ""
    for candidate in _CANDIDATES:
        if repository_ctx.path(candidate).exists:
            nvcc = candidate
            break
    if not nvcc:
        found = repository_ctx.which("nvcc")
        if found:
            nvcc = str(found)
    cuda_root = ""
    if nvcc:
        cuda_root = str(repository_ctx.path(nvcc).dirname.dirname)
    repository_ctx.file("WORKSPACE", 'workspace(name = "local_cuda")\n')
    repository_ctx.file("defs.bzl", "\n".join([
        "CUDA_AVAILABLE = %s" % ("True" if nvcc else "False"),
        'NVCC = "%s"' % nvcc,
        'CUDA_ROOT = "%s"' % cuda_root,
        "",
    ]))
    linkopts = []
    if nvcc:
        lib = cuda_root + "/lib64"
        linkopts = ["-L" + lib, "-lcublas", "-lcudart", "-Wl,-rpath," + lib]
        repository_ctx.symlink(cuda_root + "/include", "include")
    repository_ctx.file("BUILD", "\n".join([
        'package(default_visibility = ["//visibility:public"])',
        "",
        "cc_library(",
        '    name = "cuda_runtime",',
        "    hdrs = glob([\"include/**/*.h\", \"include/**/*.hpp\"]),",
        '    includes = ["include"],',
        "    linkopts = %s," % repr(linkopts),
        ")",
        "",
    ]))

cuda_configure = repository_rule(
    implementation = _cuda_configure_impl,
    environ = ["PATH"],
    local = True,
)
