// Files that appear whole or not at all: temporary file, fsync, rename, directory fsync.
#pragma once

#include <cstddef>
#include <span>
#include <string>

namespace tower {

// Writes `bytes` to `path` so that after a crash at any moment `path` holds either its old
// content (or nothing) or all of `bytes`: it writes `path`.tmp, fsyncs it, renames it onto
// `path` and fsyncs the directory. Throws tower::Error naming the path and the system's reason.
// Test hook: TOWER_TEST_CHECKPOINT_WRITE_DELAY_MS=N sleeps N ms after each MiB written, so a
// test can kill a writer in the middle.
void write_file_durably(const std::string& path, std::span<const std::byte> bytes);

// fsyncs the directory `path`, so entries created or renamed in it survive a crash.
void sync_directory(const std::string& path);

} // namespace tower
