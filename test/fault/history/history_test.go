package history

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

func TestClassify(t *testing.T) {
	gr := schema.GroupResource{Group: "certificates.rekey.io", Resource: "certificatesigningrequests"}
	for name, tc := range map[string]struct {
		err  error
		want Outcome
	}{
		"nil":                {nil, OK},
		"conflict":           {apierrors.NewConflict(gr, "a", errors.New("the object has been modified")), Failed},
		"wrapped conflict":   {fmt.Errorf("approving a: %w", apierrors.NewConflict(gr, "a", errors.New("modified"))), Failed},
		"invalid":            {apierrors.NewInvalid(schema.GroupKind{Group: gr.Group, Kind: "CertificateSigningRequest"}, "a", field.ErrorList{field.Invalid(field.NewPath("status"), "x", "no")}), Failed},
		"forbidden":          {apierrors.NewForbidden(gr, "a", errors.New("no")), Failed},
		"not found":          {apierrors.NewNotFound(gr, "a"), Failed},
		"already exists":     {apierrors.NewAlreadyExists(gr, "a"), Failed},
		"bad request":        {apierrors.NewBadRequest("no"), Failed},
		"method":             {apierrors.NewMethodNotSupported(gr, "patch"), Failed},
		"unauthorized":       {apierrors.NewUnauthorized("who"), Failed},
		"too many requests":  {apierrors.NewTooManyRequests("slow down", 1), Failed},
		"timeout":            {apierrors.NewTimeoutError("etcd", 1), Unknown},
		"server timeout":     {apierrors.NewServerTimeout(gr, "create", 1), Unknown},
		"internal":           {apierrors.NewInternalError(errors.New("etcdserver: leader changed")), Unknown},
		"unavailable":        {apierrors.NewServiceUnavailable("not ready"), Unknown},
		"bad gateway":        {apierrors.NewGenericServerResponse(502, "create", gr, "a", "", 0, true), Unknown},
		"deadline":           {fmt.Errorf("creating: %w", context.DeadlineExceeded), Unknown},
		"canceled":           {context.Canceled, Unknown},
		"eof":                {io.EOF, Unknown},
		"url error":          {&url.Error{Op: "Post", URL: "https://127.0.0.1:1", Err: io.ErrUnexpectedEOF}, Unknown},
		"connection refused": {&net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}, Unknown},
		"anything else":      {errors.New("http2: client connection lost"), Unknown},
	} {
		t.Run(name, func(t *testing.T) {
			if got := Classify(tc.err); got != tc.want {
				t.Errorf("Classify(%v) = %s, want %s", tc.err, got, tc.want)
			}
		})
	}
}

func TestHistoryRecordsConcurrentOps(t *testing.T) {
	h := New()
	const workers, each = 8, 200
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				op := h.Begin(KindCreate, w, fmt.Sprintf("w%d-%d", w, i))
				op.UID = fmt.Sprintf("uid-%d-%d", w, i)
				var err error
				if i%2 == 1 {
					err = apierrors.NewAlreadyExists(schema.GroupResource{Resource: "certificatesigningrequests"}, op.Object)
				}
				h.End(op, err)
				_ = h.Ops() // reads while others write
			}
		}()
	}
	wg.Wait()
	ops := h.Ops()
	if len(ops) != workers*each {
		t.Fatalf("got %d ops, want %d", len(ops), workers*each)
	}
	byOutcome := map[Outcome]int{}
	for i, op := range ops {
		if op.ID != i+1 {
			t.Fatalf("op %d has ID %d: want IDs 1..n in order", i, op.ID)
		}
		if op.End.Before(op.Start) || op.UID == "" {
			t.Errorf("op %d: start %s end %s uid %q", op.ID, op.Start, op.End, op.UID)
		}
		byOutcome[op.Outcome]++
		if op.Outcome == Failed && (op.Reason != "AlreadyExists" || op.Err == "") {
			t.Errorf("op %d: reason %q err %q", op.ID, op.Reason, op.Err)
		}
	}
	if byOutcome[OK] != workers*each/2 || byOutcome[Failed] != workers*each/2 {
		t.Errorf("outcomes %v, want half OK, half Failed", byOutcome)
	}
}

func TestHistoryOpsInFlight(t *testing.T) {
	h := New()
	a := h.Begin(KindApprove, 1, "a")
	b := h.Begin(KindGet, 2, "a")
	b.AfterWrite = a.ID
	h.End(b, nil)
	ops := h.Ops()
	if len(ops) != 2 || ops[0].ID != a.ID || ops[1].ID != b.ID {
		t.Fatalf("ops %+v", ops)
	}
	if ops[0].Outcome != Unknown || ops[0].Err == "" {
		t.Errorf("an op in flight is %s (%q), want Unknown: its call may still take effect", ops[0].Outcome, ops[0].Err)
	}
	if ops[1].Outcome != OK || ops[1].AfterWrite != a.ID {
		t.Errorf("ended op %+v", ops[1])
	}
	h.End(a, context.DeadlineExceeded)
	// A second End of the same op is ignored.
	h.End(a, nil)
	ops = h.Ops()
	if ops[0].Outcome != Unknown || ops[0].Err != context.DeadlineExceeded.Error() {
		t.Errorf("op %d: %s (%q), want Unknown from its first End", ops[0].ID, ops[0].Outcome, ops[0].Err)
	}
	if len(ops) != 2 {
		t.Errorf("got %d ops, want 2", len(ops))
	}
}

// bigWorld is a clean history of n request lifetimes (create, read,
// approve, read with the certificate: about 4n ops) signed by one key.
func bigWorld(t testing.TB, n int) ([]Op, []CAObservation, Final) {
	ca := newCA(t, "fault", "gen-0", t0.Add(-time.Hour))
	b := &builder{now: t0}
	final := Final{CAKeys: map[string][]*x509.Certificate{"fault": {ca.cert}}}
	for i := 0; i < n; i++ {
		name, uid := fmt.Sprintf("r%d", i), fmt.Sprintf("uid-%d", i)
		rv := 10 + 3*i
		create := b.op(KindCreate, i%3, name, uid, OK, func(o *Op) { o.ResourceVersion = fmt.Sprint(rv) }).ID
		b.op(KindGet, (i+1)%3, name, uid, OK, func(o *Op) { o.ResourceVersion = fmt.Sprint(rv); o.AfterWrite = create })
		approve := b.op(KindApprove, (i+2)%3, name, uid, OK, func(o *Op) { o.ResourceVersion = fmt.Sprint(rv + 1); o.Approved = true }).ID
		c := ca.sign(t, int64(i+1), b.now)
		b.op(KindGet, i%3, name, uid, OK, func(o *Op) {
			o.ResourceVersion = fmt.Sprint(rv + 2)
			o.Approved = true
			o.Certificate = c.pem
			o.AfterWrite = approve
		})
		final.CSRs = append(final.CSRs, FinalCSR{Name: name, UID: uid, Approved: true, Certificate: c.pem})
		final.Records = append(final.Records, c.record(name, uid))
	}
	cas := []CAObservation{obs("fault", "1", "", t0, ca, nil, nil, time.Time{})}
	final.CAs = []CAObservation{obs("fault", "1", "", b.now, ca, nil, nil, time.Time{})}
	return b.ops, cas, final
}

func TestCheckManyOps(t *testing.T) {
	n := 2000
	if testing.Short() {
		n = 200
	}
	ops, cas, final := bigWorld(t, n)
	start := time.Now()
	r := Check(ops, cas, final)
	t.Logf("checked %d ops in %s", len(ops), time.Since(start))
	wantClean(t, r)
	if r.OpsByKind[KindGet][OK] != 2*n {
		t.Errorf("OpsByKind[Get][OK] = %d, want %d", r.OpsByKind[KindGet][OK], 2*n)
	}
}

// BenchmarkCheck100kOps: go test -run XXX -bench Check ./test/fault/history/
func BenchmarkCheck100kOps(b *testing.B) {
	ops, cas, final := bigWorld(b, 25000)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if r := Check(ops, cas, final); len(r.Violations) > 0 {
			b.Fatalf("violations: %v", r.Violations[0])
		}
	}
}
