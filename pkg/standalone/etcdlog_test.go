package standalone

import (
	"sync/atomic"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// While etcd closes, the error each listener reports as it is closed is
// dropped; before that, and any other error, is logged.
func TestClosingFilterDropsListenerClosedOnlyWhileClosing(t *testing.T) {
	core, logs := observer.New(zapcore.ErrorLevel)
	closing := new(atomic.Bool)
	lg := zap.New(closingFilter{Core: core, closing: closing}).With(zap.String("member", "rekey"))
	lg.Error(listenerClosedMessage, zap.Error(errTest("accept: use of closed network connection")))
	closing.Store(true)
	lg.Error(listenerClosedMessage, zap.Error(errTest("http: Server closed")))
	lg.Error("something else failed")
	got := logs.AllUntimed()
	if len(got) != 2 || got[0].Message != listenerClosedMessage || got[1].Message != "something else failed" {
		t.Fatalf("logged %+v, want the listener error before Close and the other error", got)
	}
}

type errTest string

func (e errTest) Error() string { return string(e) }

// etcd's logger never prints stack traces.
func TestEtcdLoggerHasNoStackTraces(t *testing.T) {
	lg, err := etcdLogger(new(atomic.Bool))
	if err != nil {
		t.Fatal(err)
	}
	if ce := lg.Check(zapcore.ErrorLevel, "x"); ce == nil || ce.Stack != "" {
		t.Fatalf("checked entry %+v, want an error entry without a stack", ce)
	}
	if ce := lg.Check(zapcore.WarnLevel, "x"); ce != nil {
		t.Fatalf("a warning is logged: %+v", ce)
	}
}
