#pragma once
// Reading and writing whole files, with errors that name the path.
#include <string>

namespace pgq {

// The whole content of a file; pgq::Error naming the path when it is missing, a
// directory or unreadable. "-" reads standard input.
std::string readTextFile(const std::string& path);

// Writes `text` to `path` atomically: a temporary file in the same directory, fsync,
// then rename. On failure throws pgq::Error and leaves `path` as it was, with no
// temporary file behind.
void writeFileAtomically(const std::string& path, const std::string& text);

}  // namespace pgq
