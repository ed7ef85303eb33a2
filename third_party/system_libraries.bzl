"""Repository rule that turns pkg-config modules into cc_library targets.

Debian's gRPC alone needs ~90 link flags (Abseil, re2, upb, c-ares, OpenSSL);
asking pkg-config at fetch time keeps BUILD files short and survives library
upgrades. Each entry of `libraries` becomes `@<name>//:<target>`. A
header-only library in a default include directory (nlohmann_json) becomes
a target without flags: it names the dependency, and the fetch fails where
the package is missing.
"""

def _run_pkg_config(repository_ctx, flag, modules):
    result = repository_ctx.execute(["pkg-config", flag] + modules)
    if result.return_code != 0:
        fail("pkg-config %s %s failed (run deploy/setup.sh first): %s" %
             (flag, " ".join(modules), result.stderr))
    return [token for token in result.stdout.strip().split(" ") if token]

def _system_libraries_impl(repository_ctx):
    lines = ['package(default_visibility = ["//visibility:public"])', ""]
    for target, modules in repository_ctx.attr.libraries.items():
        defines = []
        includes = []
        for flag in _run_pkg_config(repository_ctx, "--cflags", modules):
            if flag.startswith("-D"):
                defines.append(flag[2:])
            elif flag.startswith("-I"):
                # Non-default include directories are linked into the
                # repository so that the sandbox sees them.
                link = "include_%s_%d" % (target.replace("+", "p"), len(includes))
                repository_ctx.symlink(flag[2:], link)
                includes.append(link)
        linkopts = _run_pkg_config(repository_ctx, "--libs", modules)
        lines.append("cc_library(")
        lines.append('    name = "%s",' % target)
        lines.append("    hdrs = glob([%s])," % ", ".join(['"%s/**"' % i for i in includes]))
        lines.append("    includes = %s," % repr(includes))
        lines.append("    defines = %s," % repr(defines))
        lines.append("    linkopts = %s," % repr(linkopts))
        if target in repository_ctx.attr.target_visibility:
            lines.append("    visibility = %s," % repr(repository_ctx.attr.target_visibility[target]))
        lines.append(")")
        lines.append("")
    repository_ctx.file("WORKSPACE", 'workspace(name = "%s")\n' % repository_ctx.name)
    repository_ctx.file("BUILD", "\n".join(lines))

system_libraries = repository_rule(
    implementation = _system_libraries_impl,
    attrs = {
        "libraries": attr.string_list_dict(
            doc = "target name -> pkg-config modules it links",
        ),
        "target_visibility": attr.string_list_dict(
            doc = "target name -> the packages that may use it (default: all)",
        ),
    },
    local = True,
)
