// Where Hypura keeps what it measured or learned (the hardware profile, expert routing
// statistics): $XDG_CACHE_HOME/hypura, else $HOME/.cache/hypura. Without either (a service
// with no home) it is a private directory $TMPDIR/hypura-<uid> (TMPDIR defaults to /tmp),
// created with mode 0700 and refused when it exists but is a link, not ours or not
// private: in a shared /tmp another user could otherwise plant links to files we would
// overwrite. Tests point XDG_CACHE_HOME at a scratch directory (ctest sets it for all).
//
// Thread-safety: reads the environment; may create the fallback directory.
#pragma once

#include <string>

#include "common/status.h"

namespace hypura {

// The cache directory (not created unless it is the private fallback), or why none is safe.
Result<std::string> cache_dir();

}  // namespace hypura
