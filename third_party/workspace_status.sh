#!/usr/bin/env bash
# Bazel's --workspace_status_command (.bazelrc): the commit the build is made
# from, which //base:build_info stamps into every binary (--version). A tree
# with uncommitted changes says so ("-dirty"); outside a git checkout the
# commit is "unknown".
commit=$(git rev-parse --short=12 HEAD 2>/dev/null) || commit=unknown
if [ "$commit" != unknown ] && ! git diff --quiet HEAD -- 2>/dev/null; then
  commit="$commit-dirty"
fi
echo "STABLE_GIT_COMMIT $commit"
