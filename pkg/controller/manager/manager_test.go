package manager

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	"rekey.io/rekey/pkg/authority"
	"rekey.io/rekey/pkg/generated/clientset/versioned/fake"
	informers "rekey.io/rekey/pkg/generated/informers/externalversions"
	certinformers "rekey.io/rekey/pkg/generated/informers/externalversions/certificates/v1alpha1"
	rotationinformers "rekey.io/rekey/pkg/generated/informers/externalversions/rotation/v1alpha1"
	"rekey.io/rekey/pkg/issuance"
	"rekey.io/rekey/pkg/leaderelection"
	"rekey.io/rekey/pkg/signing/cabinding"
)

func TestTrimForCacheKeepsWhatTheControllersRead(t *testing.T) {
	pending := &certv1alpha1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "p", ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "x"}}},
		Spec:       certv1alpha1.CertificateSigningRequestSpec{Request: []byte("req")},
		Status: certv1alpha1.CertificateSigningRequestStatus{Conditions: []certv1alpha1.CertificateSigningRequestCondition{
			{Type: certv1alpha1.CertificateApproved, Status: "True"}}},
	}
	out, err := TrimForCache(pending)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*certv1alpha1.CertificateSigningRequest)
	if got.ManagedFields != nil {
		t.Error("managed fields kept")
	}
	if string(got.Spec.Request) != "req" || len(got.Status.Conditions) != 1 {
		t.Error("the request or its conditions were dropped; the signer needs them")
	}
}

// TestControllersWatchOnlyWhatTheyActOn: the approver's and signer's
// informers select by state.
func TestControllersWatchOnlyWhatTheyActOn(t *testing.T) {
	client := fake.NewSimpleClientset()
	for _, state := range []string{certv1alpha1.StatePending, certv1alpha1.StateApproved} {
		f := csrFactory(client, state)
		f.Certificates().V1alpha1().CertificateSigningRequests().Informer()
		ctx, cancel := context.WithCancel(context.Background())
		f.Start(ctx.Done())
		f.WaitForCacheSync(ctx.Done())
		cancel()
		f.Shutdown()
	}
	var selectors []string
	for _, a := range client.Actions() {
		if a.GetVerb() == "list" {
			selectors = append(selectors, a.(k8stesting.ListActionImpl).GetListRestrictions().Fields.String())
		}
	}
	if strings.Join(selectors, " ") != "state=Pending state=Approved" {
		t.Fatalf("listed with field selectors %q, want state=Pending and state=Approved", selectors)
	}
}

// testDeps are the shared parts a server hands the manager, on a fake
// client: one informer factory, one CA-key service.
func testDeps(client *fake.Clientset) (Deps, informers.SharedInformerFactory) {
	factory := informers.NewSharedInformerFactory(client, 0)
	cas := factory.Rotation().V1alpha1().CertificateAuthorities()
	auth := authority.NewService(authority.Config{CAs: cas.Lister(), Stores: &authority.KeyStores{}, Bindings: cabinding.NewMemoryStore(),
		Records: noRecords{}, Clock: clock.RealClock{}})
	return Deps{Client: client, Authority: auth, CAs: cas, Signers: factory.Certificates().V1alpha1().Signers(), Clock: clock.RealClock{}}, factory
}

// TestReadinessFailsWhenControllersCannotStart: a replica whose controllers
// cannot run must not report ready.
func TestReadinessFailsWhenControllersCannotStart(t *testing.T) {
	client := fake.NewSimpleClientset()
	client.PrependReactor("create", "*", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("connection refused")
	})
	deps, _ := testDeps(client)
	m, err := New(Options{}, deps)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Check(nil); err != nil {
		t.Fatalf("not started yet: %v", err)
	}
	m.Run(context.Background())
	if err := m.Check(nil); err == nil || !strings.Contains(err.Error(), "built-in") {
		t.Fatalf("Check = %v, want a failure naming the built-ins", err)
	}
}

// TestATransientFailureOfTheBuiltInsIsRetried: a 503 from rekey's own API
// while the term creates the built-ins (etcd electing a leader under it)
// is retried within the term, and the replica ends ready with the
// controllers running. Returned, it ended the term and left the replica
// unready until it next led, which may be never.
func TestATransientFailureOfTheBuiltInsIsRetried(t *testing.T) {
	client := fake.NewSimpleClientset()
	var failed sync.Once
	client.PrependReactor("create", "*", func(k8stesting.Action) (bool, runtime.Object, error) {
		var err error
		failed.Do(func() { err = apierrors.NewServiceUnavailable("etcdserver: leader changed") })
		return err != nil, nil, err
	})
	deps, _ := testDeps(client)
	m, err := New(Options{}, deps)
	if err != nil {
		t.Fatal(err)
	}
	done := runInBackground(t, m)
	err = wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		signers, err := client.CertificatesV1alpha1().Signers().List(context.Background(), metav1.ListOptions{})
		if err != nil || len(signers.Items) == 0 {
			return false, err
		}
		select {
		case <-done:
			return false, errors.New("the term ended")
		default:
		}
		return m.Check(nil) == nil, nil
	})
	if err != nil {
		t.Fatalf("after one 503: %v (Check = %v)", err, m.Check(nil))
	}
}

// runInBackground runs m until the test ends, and returns a channel closed
// when Run returns.
func runInBackground(t *testing.T, m *Manager) <-chan struct{} {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return done
}

// TestATermThatStartsClearsAnEarlierFailure: a term whose controllers
// start makes the replica ready again; an earlier term's failure was kept
// until this term ended.
func TestATermThatStartsClearsAnEarlierFailure(t *testing.T) {
	client := fake.NewSimpleClientset()
	deps, _ := testDeps(client)
	m, err := New(Options{}, deps)
	if err != nil {
		t.Fatal(err)
	}
	m.report(errors.New("creating the built-in signers: connection refused"))
	runInBackground(t, m)
	if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return m.Check(nil) == nil, nil
	}); err != nil {
		t.Fatalf("a term that started: Check = %v, want ready", m.Check(nil))
	}
}

// TestATermCutShortLeavesTheReplicaReady: a term that ends while the
// controllers start (the lease lapsed: the election cancels the work) is
// not a replica that cannot run them. Reporting its "context canceled"
// kept a follower unready until it next won the election: minutes, in the
// fault suite, after an etcd leader was lost under load.
func TestATermCutShortLeavesTheReplicaReady(t *testing.T) {
	client := fake.NewSimpleClientset()
	ctx, cancel := context.WithCancel(context.Background())
	client.PrependReactor("create", "*", func(k8stesting.Action) (bool, runtime.Object, error) {
		// The lease lapses while the built-ins are being created.
		cancel()
		return true, nil, context.Canceled
	})
	deps, _ := testDeps(client)
	m, err := New(Options{}, deps)
	if err != nil {
		t.Fatal(err)
	}
	m.Run(ctx)
	if err := m.Check(nil); err != nil {
		t.Fatalf("Check after a term cut short = %v, want ready", err)
	}
}

// TestATermWhoseFenceLapsedLeavesTheReplicaReady: at the lease deadline
// the fence says "not leading" at once, while the work context is
// cancelled only once the election's goroutines have run (after a
// SIGSTOP, all of them are runnable at the same moment). A term whose
// built-ins failed in between, refused by the fence or with any error
// once the fence no longer leads, ended with its leadership: it must
// leave the replica ready as a cancelled term does.
func TestATermWhoseFenceLapsedLeavesTheReplicaReady(t *testing.T) {
	// A fence whose term's lease deadline has passed: it leads no more.
	lapsed := leaderelection.NewFence()
	for _, tc := range []struct {
		name string
		// depsFence is Deps.Fence (the server's); ctxFence the fence the
		// work context carries (the election's, its own when Deps has
		// none).
		depsFence, ctxFence *leaderelection.Fence
		failure             error
	}{
		{name: "refused by the fence", failure: fmt.Errorf("POST /apis/...: %w", leaderelection.ErrNotLeading)},
		{name: "another error once the server's fence lapsed", depsFence: lapsed, ctxFence: lapsed, failure: errors.New("connection reset by peer")},
		{name: "another error once the election's own fence lapsed", ctxFence: lapsed, failure: errors.New("connection reset by peer")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewSimpleClientset()
			client.PrependReactor("create", "*", func(k8stesting.Action) (bool, runtime.Object, error) {
				return true, nil, tc.failure
			})
			deps, _ := testDeps(client)
			deps.Fence = tc.depsFence
			m, err := New(Options{}, deps)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if tc.ctxFence != nil {
				ctx = leaderelection.WithFence(ctx, tc.ctxFence)
			}
			m.Run(ctx)
			if ctx.Err() != nil {
				t.Fatal("the work context was cancelled; the test is of a fence that lapsed before it")
			}
			if err := m.Check(nil); err != nil {
				t.Fatalf("Check after a term whose fence lapsed = %v, want ready", err)
			}
		})
	}
	// The same failure while the fence leads is the replica's.
	client := fake.NewSimpleClientset()
	client.PrependReactor("create", "*", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("connection reset by peer")
	})
	deps, _ := testDeps(client)
	m, err := New(Options{}, deps)
	if err != nil {
		t.Fatal(err)
	}
	m.Run(context.Background())
	if err := m.Check(nil); err == nil {
		t.Fatal("Check after a failure while leading = ready, want the failure")
	}
}

// TestNewRefusesMissingDependencies: what the controllers need is checked
// once, at construction, not found missing while they run.
func TestNewRefusesMissingDependencies(t *testing.T) {
	deps, _ := testDeps(fake.NewSimpleClientset())
	if _, err := New(Options{LeaderElect: true}, deps); err == nil || !strings.Contains(err.Error(), "etcd") {
		t.Errorf("leader election without etcd: %v", err)
	}
	deps.Authority = nil
	if _, err := New(Options{}, deps); err == nil {
		t.Error("no CA-key service accepted")
	}
}

// TestATermBorrowsTheServersInformers: a leadership term runs its
// controllers on the server's CA and Signer informers (no second list or
// watch of either), and removes its handlers when it ends, so that the
// next term does not run beside a stale set.
func TestATermBorrowsTheServersInformers(t *testing.T) {
	client := fake.NewSimpleClientset()
	deps, factory := testDeps(client)
	caInformer, signerInformer := &countingInformer{SharedIndexInformer: deps.CAs.Informer()}, &countingInformer{SharedIndexInformer: deps.Signers.Informer()}
	deps.CAs, deps.Signers = countingCAs{deps.CAs, caInformer}, countingSigners{deps.Signers, signerInformer}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())

	m, err := New(Options{SignerWorkers: 1, CleanerInterval: time.Hour}, deps)
	if err != nil {
		t.Fatal(err)
	}
	term, endTerm := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = m.runControllers(term) }()
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return caInformer.handlers() > 0 && signerInformer.handlers() > 0, nil
	}); err != nil {
		t.Fatal("the term's controllers added no handlers to the server's informers")
	}
	endTerm()
	<-done
	if n := caInformer.handlers(); n != 0 {
		t.Errorf("%d CA handlers left after the term", n)
	}
	if n := signerInformer.handlers(); n != 0 {
		t.Errorf("%d Signer handlers left after the term", n)
	}
	counts := map[string]int{}
	for _, a := range client.Actions() {
		if a.GetVerb() == "list" || a.GetVerb() == "watch" {
			counts[a.GetVerb()+" "+a.GetResource().Resource]++
		}
	}
	for _, r := range []string{"certificateauthorities", "signers"} {
		if counts["list "+r] != 1 || counts["watch "+r] != 1 {
			t.Errorf("%s listed %d and watched %d times, want once each (the server's informer)", r, counts["list "+r], counts["watch "+r])
		}
	}
}

// countingInformer counts the handlers added and still registered.
type countingInformer struct {
	cache.SharedIndexInformer
	mu   sync.Mutex
	live map[cache.ResourceEventHandlerRegistration]bool
}

func (c *countingInformer) count(reg cache.ResourceEventHandlerRegistration, err error) (cache.ResourceEventHandlerRegistration, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.live == nil {
		c.live = map[cache.ResourceEventHandlerRegistration]bool{}
	}
	c.live[reg] = true
	return reg, err
}

func (c *countingInformer) AddEventHandler(h cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error) {
	return c.count(c.SharedIndexInformer.AddEventHandler(h))
}

func (c *countingInformer) AddEventHandlerWithResyncPeriod(h cache.ResourceEventHandler, d time.Duration) (cache.ResourceEventHandlerRegistration, error) {
	return c.count(c.SharedIndexInformer.AddEventHandlerWithResyncPeriod(h, d))
}

func (c *countingInformer) AddEventHandlerWithOptions(h cache.ResourceEventHandler, o cache.HandlerOptions) (cache.ResourceEventHandlerRegistration, error) {
	return c.count(c.SharedIndexInformer.AddEventHandlerWithOptions(h, o))
}

func (c *countingInformer) RemoveEventHandler(reg cache.ResourceEventHandlerRegistration) error {
	c.mu.Lock()
	delete(c.live, reg)
	c.mu.Unlock()
	return c.SharedIndexInformer.RemoveEventHandler(reg)
}

func (c *countingInformer) handlers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.live)
}

type countingCAs struct {
	rotationinformers.CertificateAuthorityInformer
	inf *countingInformer
}

func (c countingCAs) Informer() cache.SharedIndexInformer { return c.inf }

type countingSigners struct {
	certinformers.SignerInformer
	inf *countingInformer
}

func (c countingSigners) Informer() cache.SharedIndexInformer { return c.inf }

type noRecords struct{}

func (noRecords) Record(context.Context, issuance.Record) error { return nil }
func (noRecords) Scan(context.Context, string, func(issuance.Record) error) error {
	return nil
}
func (noRecords) Revision(context.Context, string) (int64, error) { return 0, nil }
func (noRecords) Prune(context.Context, string, func(issuance.Record) bool) (int, error) {
	return 0, nil
}
