// File: base/durable_file.h
//
// Writes a small file so that it survives a machine crash whole or not at
// all: written beside, fsynced, renamed into place, its directory fsynced.
// For manifests, markers and identities; not for data.

#ifndef PS_BASE_DURABLE_FILE_H_
#define PS_BASE_DURABLE_FILE_H_

#include <string>

#include "absl/status/status.h"

namespace ps {

// Replaces `path` with `contents`. INTERNAL, with the reason, on failure.
absl::Status WriteFileDurably(const std::string& path,
                              const std::string& contents);

// Removes `path` (if there) and fsyncs its directory.
absl::Status RemoveFileDurably(const std::string& path);

}  // namespace ps

#endif  // PS_BASE_DURABLE_FILE_H_
