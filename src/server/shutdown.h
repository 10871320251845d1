#pragma once
// Graceful SIGINT/SIGTERM: stop accepting, end in-flight streams, return so the process exits 0.
#include "server/http_server.h"

namespace tf::server {

// Blocks SIGINT/SIGTERM in the calling thread and every thread it starts afterwards (so the engine's
// threads never take them) and ignores SIGPIPE (a client gone mid-write is handled as an error).
// Call first thing, before the engine starts.
void block_shutdown_signals();

// Runs the server until SIGINT or SIGTERM arrives, then stops it and returns once it has drained.
void serve_until_signal(HttpServer& server);

}  // namespace tf::server
