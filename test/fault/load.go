package fault

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	mathrand "math/rand"
	"sync"
	"time"

	"golang.org/x/time/rate"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	"rekey.io/rekey/pkg/authority"
	"rekey.io/rekey/test/fault/history"
)

// The CA the load rotates and its Signer (Manual approval: the load
// approves and denies).
const (
	faultCA     = "fault"
	faultSigner = "example.com/fault"
	// kubeletSigner approves NodeClient creates through selfnodeclient.
	kubeletSigner = "rekey.io/kube-apiserver-client-kubelet"
	// opTimeout bounds one client call: a paused replica or an etcd
	// without quorum costs the load this much, then it moves on.
	opTimeout = 10 * time.Second
)

// load drives the mixed load against the replicas and records every call
// in the history.
type load struct {
	rs *replicaSet
	h  *history.History
	// limiter paces request lifetimes across the workers (nil: as fast as
	// the replicas answer).
	limiter *rate.Limiter

	mu  sync.Mutex
	cas []history.CAObservation
}

// worker runs request lifetimes until ctx is done: create then approve,
// create then deny, and NodeClient creates, each on a random replica, each
// acknowledged write followed by a read on another replica.
func (l *load) worker(ctx context.Context, w int, rng *mathrand.Rand) {
	for n := 0; ctx.Err() == nil; n++ {
		if l.limiter != nil && l.limiter.Wait(ctx) != nil {
			return
		}
		name := fmt.Sprintf("w%d-%d", w, n)
		switch p := rng.Intn(100); {
		case p < 60:
			l.createThenDecide(ctx, rng, name, history.KindApprove)
		case p < 75:
			l.createThenDecide(ctx, rng, name, history.KindDeny)
		default:
			l.nodeClient(ctx, rng, name)
		}
	}
}

func (l *load) createThenDecide(ctx context.Context, rng *mathrand.Rand, name string, decision history.Kind) {
	csr, err := newRequest(name, faultSigner, "fault-"+name, nil, certv1alpha1.UsageDigitalSignature, certv1alpha1.UsageClientAuth)
	if err != nil {
		return
	}
	r := rng.Intn(len(l.rs.replicas))
	op := l.h.Begin(history.KindCreate, r, name)
	created, err := l.call(ctx, func(ctx context.Context) (*certv1alpha1.CertificateSigningRequest, error) {
		return l.rs.admin[r].CertificatesV1alpha1().CertificateSigningRequests().Create(ctx, csr, metav1.CreateOptions{})
	})
	fill(op, created)
	l.h.End(op, err)
	switch op.Outcome {
	case history.OK:
		l.readAfter(ctx, rng, op)
	case history.Unknown:
		// It may be stored: find it, to decide it all the same.
		if created = l.find(ctx, rng, name); created == nil {
			return
		}
	default:
		return
	}
	r = rng.Intn(len(l.rs.replicas))
	op = l.h.Begin(decision, r, name)
	reason, typ := "FaultLoad", certv1alpha1.CertificateApproved
	if decision == history.KindDeny {
		typ = certv1alpha1.CertificateDenied
	}
	decided := created.DeepCopy()
	decided.Status.Conditions = append(decided.Status.Conditions, certv1alpha1.CertificateSigningRequestCondition{
		Type: typ, Status: metav1.ConditionTrue, Reason: reason, Message: "by the fault suite's load",
	})
	out, err := l.call(ctx, func(ctx context.Context) (*certv1alpha1.CertificateSigningRequest, error) {
		return l.rs.admin[r].CertificatesV1alpha1().CertificateSigningRequests().UpdateApproval(ctx, name, decided, metav1.UpdateOptions{})
	})
	fill(op, out)
	op.UID = string(created.UID)
	l.h.End(op, err)
	if op.Outcome == history.OK {
		l.readAfter(ctx, rng, op)
	}
}

func (l *load) nodeClient(ctx context.Context, rng *mathrand.Rand, name string) {
	csr, err := newRequest(name, kubeletSigner, "system:node:fault-node", []string{"system:nodes"},
		certv1alpha1.UsageDigitalSignature, certv1alpha1.UsageKeyEncipherment, certv1alpha1.UsageClientAuth)
	if err != nil {
		return
	}
	r := rng.Intn(len(l.rs.replicas))
	op := l.h.Begin(history.KindNodeClient, r, name)
	out, err := l.call(ctx, func(ctx context.Context) (*certv1alpha1.CertificateSigningRequest, error) {
		return l.rs.node[r].CertificatesV1alpha1().CertificateSigningRequests().CreateSelfNodeClient(ctx, name, csr, metav1.CreateOptions{})
	})
	fill(op, out)
	l.h.End(op, err)
	if op.Outcome == history.OK {
		l.readAfter(ctx, rng, op)
	}
}

// readAfter reads the object an acknowledged write wrote, on another
// replica than the one that took the write: a GET without a
// resourceVersion is a quorum read, so it must see the write.
func (l *load) readAfter(ctx context.Context, rng *mathrand.Rand, write *history.Op) {
	n := len(l.rs.replicas)
	r := (write.Replica + 1 + rng.Intn(n-1)) % n
	op := l.h.Begin(history.KindGet, r, write.Object)
	op.AfterWrite = write.ID
	out, err := l.call(ctx, func(ctx context.Context) (*certv1alpha1.CertificateSigningRequest, error) {
		return l.rs.admin[r].CertificatesV1alpha1().CertificateSigningRequests().Get(ctx, write.Object, metav1.GetOptions{})
	})
	fill(op, out)
	l.h.End(op, err)
}

// find reads a request whose create had an unknown outcome, from any
// replica that answers (nil when it is not stored or nobody answers).
func (l *load) find(ctx context.Context, rng *mathrand.Rand, name string) *certv1alpha1.CertificateSigningRequest {
	for attempt := 0; attempt < 3 && ctx.Err() == nil; attempt++ {
		r := rng.Intn(len(l.rs.replicas))
		op := l.h.Begin(history.KindGet, r, name)
		out, err := l.call(ctx, func(ctx context.Context) (*certv1alpha1.CertificateSigningRequest, error) {
			return l.rs.admin[r].CertificatesV1alpha1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
		})
		fill(op, out)
		l.h.End(op, err)
		switch op.Outcome {
		case history.OK:
			return out
		case history.Failed:
			return nil
		}
	}
	return nil
}

// call runs one client call with opTimeout, not cut short by the end of
// the run (an op in flight when the load stops still gets its outcome).
func (l *load) call(_ context.Context, f func(context.Context) (*certv1alpha1.CertificateSigningRequest, error)) (*certv1alpha1.CertificateSigningRequest, error) {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	return f(ctx)
}

// fill copies into op what a response carried.
func fill(op *history.Op, csr *certv1alpha1.CertificateSigningRequest) {
	if csr == nil || csr.Name == "" {
		return
	}
	op.UID, op.ResourceVersion = string(csr.UID), csr.ResourceVersion
	for _, c := range csr.Status.Conditions {
		if c.Status != metav1.ConditionTrue {
			continue
		}
		switch c.Type {
		case certv1alpha1.CertificateApproved:
			op.Approved = true
		case certv1alpha1.CertificateDenied:
			op.Denied = true
		case certv1alpha1.CertificateFailed:
			op.Failed = true
		}
	}
	if len(csr.Status.Certificate) > 0 {
		op.Certificate = append([]byte(nil), csr.Status.Certificate...)
	}
}

// rotator rotates the fault CA start to complete, over and over, each
// action on a random replica.
func (l *load) rotator(ctx context.Context, rng *mathrand.Rand) {
	for ctx.Err() == nil {
		if !l.rotate(ctx, rng, rotationv1alpha1.RotationStart, rotationv1alpha1.PhasePrepared) {
			continue
		}
		if !l.rotate(ctx, rng, rotationv1alpha1.RotationComplete, rotationv1alpha1.PhaseCompleted) {
			continue
		}
		pace(ctx, time.Duration(1+rng.Intn(4))*time.Second)
	}
}

// rotate asks for one action until it is acknowledged or refused, then
// waits (bounded) for the phase it leads to; false when the run ended or
// the phase was not reached.
func (l *load) rotate(ctx context.Context, rng *mathrand.Rand, action rotationv1alpha1.RotationAction, want rotationv1alpha1.RotationPhase) bool {
	kind := history.KindRotateStart
	if action == rotationv1alpha1.RotationComplete {
		kind = history.KindRotateComplete
	}
	for ctx.Err() == nil {
		r := rng.Intn(len(l.rs.replicas))
		op := l.h.Begin(kind, r, faultCA)
		cctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		_, err := l.rs.admin[r].RotationV1alpha1().CertificateAuthorities().Rotate(cctx, faultCA,
			&rotationv1alpha1.Rotation{Action: action, Force: action == rotationv1alpha1.RotationComplete}, metav1.CreateOptions{})
		cancel()
		l.h.End(op, err)
		if op.Outcome != history.Unknown {
			break
		}
	}
	deadline := time.Now().Add(90 * time.Second)
	for ctx.Err() == nil && time.Now().Before(deadline) {
		if phase, ok := l.lastPhase(); ok && phase == string(want) {
			return true
		}
		pace(ctx, 200*time.Millisecond)
	}
	return false
}

// observeCAs reads every CA from a random replica every 200 ms and keeps
// what it saw: the checker's view of phases and keys over time.
func (l *load) observeCAs(ctx context.Context, rng *mathrand.Rand) {
	for ctx.Err() == nil {
		r := rng.Intn(len(l.rs.replicas))
		cctx, cancel := context.WithTimeout(ctx, opTimeout)
		list, err := l.rs.admin[r].RotationV1alpha1().CertificateAuthorities().List(cctx, metav1.ListOptions{})
		cancel()
		if err == nil {
			now := time.Now()
			l.mu.Lock()
			for i := range list.Items {
				l.cas = append(l.cas, caObservation(now, &list.Items[i]))
			}
			l.mu.Unlock()
		}
		pace(ctx, 200*time.Millisecond)
	}
}

// lastPhase is the fault CA's phase in the newest observation.
func (l *load) lastPhase() (string, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := len(l.cas) - 1; i >= 0; i-- {
		if l.cas[i].Name == faultCA {
			return l.cas[i].Phase, true
		}
	}
	return "", false
}

func (l *load) observations() []history.CAObservation {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]history.CAObservation(nil), l.cas...)
}

func caObservation(at time.Time, ca *rotationv1alpha1.CertificateAuthority) history.CAObservation {
	o := history.CAObservation{Time: at, Name: ca.Name, ResourceVersion: ca.ResourceVersion, Phase: string(ca.Status.Phase)}
	parse := func(c *rotationv1alpha1.CACertificate) *x509.Certificate {
		if c == nil {
			return nil
		}
		cert, err := authority.ParseCertificatePEM(c.Certificate)
		if err != nil {
			return nil
		}
		return cert
	}
	o.Current, o.Next, o.Previous = parse(ca.Status.Current), parse(ca.Status.Next), parse(ca.Status.Previous)
	keyID := func(c *rotationv1alpha1.CACertificate) string {
		if c == nil {
			return ""
		}
		return c.KeyID
	}
	o.CurrentKeyID, o.NextKeyID, o.PreviousKeyID = keyID(ca.Status.Current), keyID(ca.Status.Next), keyID(ca.Status.Previous)
	if ca.Status.LastCompletionTime != nil {
		o.LastCompletionTime = ca.Status.LastCompletionTime.Time
	}
	return o
}

// pace waits d or until ctx is done: the load's own rhythm, not a wait
// for a condition.
func pace(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// newRequest is a request for a fresh P-256 key.
func newRequest(name, signer, cn string, orgs []string, usages ...certv1alpha1.KeyUsage) (*certv1alpha1.CertificateSigningRequest, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: cn, Organization: orgs}}, key)
	if err != nil {
		return nil, err
	}
	return &certv1alpha1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: certv1alpha1.CertificateSigningRequestSpec{
			Request:           pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
			SignerName:        signer,
			ExpirationSeconds: ptr.To[int32](7200),
			Usages:            usages,
		},
	}, nil
}
