package telemetry

import (
	"net/http"
	"net/http/pprof"
)

// RegisterPprof serves Go's runtime profiles under /debug/pprof/ on mux (the
// metrics listener's, which needs no token: enable it only where that
// listener is private). A CPU profile costs the process little while
// nobody asks for one.
func RegisterPprof(mux *http.ServeMux) {
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
}
