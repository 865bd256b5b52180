// Package quietlog gives the calls that carry credentials a logger that
// cannot dump them.
//
// client-go logs HTTP traffic through the logger of the call's context
// (klog.FromContext): rest.Request logs every request and response body at
// V(8) and up (whole at V(10)), and the debugging round tripper, which
// every client gets when the process starts at -v=6 or more, logs headers
// and a curl command per request at V(7) to V(9). A Secret read or write,
// a TokenRequest's answer, a TokenReview all carry credentials in those
// bodies. A context made by Context logs nothing above MaxLevel, whatever
// -v says, so a client called with it never dumps a body or a header; the
// caller's own messages up to MaxLevel, its values and names are kept.
//
// It relies on klog's contextual logging (with it off, klog.FromContext
// ignores the context): component-base's logs.InitLogs turns it off, so
// rekey-apiserver turns it back on, and Context does if it finds it off.
package quietlog

import (
	"context"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
)

// MaxLevel is the highest verbosity a quiet logger logs: below client-go's
// first traffic dump (V(6), the debugging round tripper's URLs; bodies
// from V(8)).
const MaxLevel = 5

// Context returns ctx with its logger made quiet.
func Context(ctx context.Context) context.Context {
	if !contextual() {
		// Contextual logging is off (component-base's logs.InitLogs
		// turns it off): klog.NewContext would drop the quiet logger,
		// klog.FromContext would ignore it, and client-go would log
		// through the global one at full -v. The guarantee outranks
		// that default.
		klog.EnableContextualLogging(true)
	}
	logger := klog.FromContext(ctx)
	if _, ok := logger.GetSink().(sink); ok {
		return ctx
	}
	return klog.NewContext(ctx, Logger(logger))
}

// contextual reports whether klog keeps and returns a context's logger.
func contextual() bool {
	probe := logr.New(sink{inner: klog.Background().GetSink()})
	_, ok := klog.FromContext(klog.NewContext(context.Background(), probe)).GetSink().(sink)
	return ok
}

// Logger returns logger without its messages above MaxLevel.
func Logger(logger klog.Logger) klog.Logger {
	inner := logger.GetSink()
	if inner == nil {
		return logger
	}
	if _, ok := inner.(sink); ok {
		return logger
	}
	// One more frame (this sink's) between the caller and the inner
	// sink: file and line stay the caller's.
	if cd, ok := inner.(logr.CallDepthLogSink); ok {
		inner = cd.WithCallDepth(1)
	}
	return logr.New(sink{inner: inner}).V(logger.GetV())
}

// sink passes everything to inner except messages above MaxLevel.
type sink struct {
	inner logr.LogSink
}

// Init does nothing: inner was initialised by the logger it came from
// (and may be shared; klog's Init changes it in place).
func (sink) Init(logr.RuntimeInfo) {}

func (s sink) Enabled(level int) bool {
	return level <= MaxLevel && s.inner.Enabled(level)
}

func (s sink) Info(level int, msg string, keysAndValues ...any) {
	if level > MaxLevel {
		return
	}
	s.inner.Info(level, msg, keysAndValues...)
}

func (s sink) Error(err error, msg string, keysAndValues ...any) {
	s.inner.Error(err, msg, keysAndValues...)
}

func (s sink) WithValues(keysAndValues ...any) logr.LogSink {
	return sink{inner: s.inner.WithValues(keysAndValues...)}
}

func (s sink) WithName(name string) logr.LogSink {
	return sink{inner: s.inner.WithName(name)}
}

func (s sink) WithCallDepth(depth int) logr.LogSink {
	if cd, ok := s.inner.(logr.CallDepthLogSink); ok {
		return sink{inner: cd.WithCallDepth(depth)}
	}
	return s
}

var (
	_ logr.LogSink          = sink{}
	_ logr.CallDepthLogSink = sink{}
)
