package watch

import (
	"log/slog"
	"sync"

	"k8s.io/klog/v2"
)

// SetClientLogger sends client-go's own log lines (klog: a reflector that
// cannot reach the API server, a watch that ended) to logger instead of
// stderr. It changes process-wide state, so only a main package calls it, once,
// before New.
func SetClientLogger(logger *slog.Logger) {
	klog.SetSlogLogger(logger.With("component", "client-go"))
}

// warningLogger logs each distinct API server warning once, e.g. "v1
// Endpoints is deprecated in v1.33+", which the server sends with every list
// and watch of Endpoints; client-go's default would print it every time.
type warningLogger struct {
	log  *slog.Logger
	mu   sync.Mutex
	seen map[string]bool
}

// HandleWarningHeader implements rest.WarningHandler.
func (h *warningLogger) HandleWarningHeader(code int, _ string, text string) {
	if code != 299 || text == "" { // 299: RFC 7234's "Miscellaneous persistent warning"
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.seen[text] {
		return
	}
	h.seen[text] = true
	h.log.Warn("api server warning", "warning", text)
}
