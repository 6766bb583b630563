package swarmworker

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
)

// client-go logs through klog, which writes to stderr unless it is given a logger. Run points
// it at the worker's logger. klog's logger is global and must not be replaced while others
// log, so it is set once per process, to a handler that forwards to the logger of the Run
// started last.
var (
	klogOnce   sync.Once
	klogTarget atomic.Pointer[slog.Logger]
)

// routeKlog sends klog's lines (client-go's among them) to log from now on, each with the
// attribute logger=klog.
func routeKlog(log *slog.Logger) {
	klogTarget.Store(log)
	klogOnce.Do(func() { klog.SetLogger(logr.FromSlogHandler(klogHandler{}).WithName("klog")) })
}

// klogHandler forwards each record to the handler of klogTarget as it is when the record
// comes, with the attributes and groups klog added on the way.
type klogHandler struct {
	with []func(slog.Handler) slog.Handler
}

func (h klogHandler) target() slog.Handler {
	target := klogTarget.Load().Handler()
	for _, with := range h.with {
		target = with(target)
	}
	return target
}

func (h klogHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.target().Enabled(ctx, level)
}

func (h klogHandler) Handle(ctx context.Context, record slog.Record) error {
	return h.target().Handle(ctx, record)
}

func (h klogHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return h.and(func(target slog.Handler) slog.Handler { return target.WithAttrs(attrs) })
}

func (h klogHandler) WithGroup(name string) slog.Handler {
	return h.and(func(target slog.Handler) slog.Handler { return target.WithGroup(name) })
}

func (h klogHandler) and(with func(slog.Handler) slog.Handler) klogHandler {
	return klogHandler{with: append(slices.Clip(h.with), with)}
}
