package trustsync

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
	k8stesting "k8s.io/client-go/testing"

	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	"rekey.io/rekey/pkg/generated/clientset/versioned/fake"
	"rekey.io/rekey/pkg/pki"
	"rekey.io/rekey/pkg/signing"
	"rekey.io/rekey/pkg/strictpem"
)

func newCA(t *testing.T, name string) *pki.KeyPair {
	t.Helper()
	ca, err := pki.NewCA(name, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// caObject is CertificateAuthority name with bundle as its trust bundle.
func caObject(name string, bundle ...*pki.KeyPair) *rotationv1alpha1.CertificateAuthority {
	ca := &rotationv1alpha1.CertificateAuthority{ObjectMeta: metav1.ObjectMeta{Name: name}}
	for _, kp := range bundle {
		ca.Status.TrustBundle += string(kp.CertPEM())
	}
	return ca
}

func fp(kp *pki.KeyPair) string { return signing.Fingerprint(kp.Cert) }

// fileCerts are the certificates of the file, by subject CN, in order.
func fileCerts(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	certs, err := strictpem.Certificates(data, 100)
	if err != nil {
		t.Fatal(err)
	}
	var cns []string
	for _, c := range certs {
		cns = append(cns, c.Subject.CommonName)
	}
	return cns
}

func consumer(t *testing.T, client *fake.Clientset, name string) *rotationv1alpha1.TrustConsumer {
	t.Helper()
	tc, err := client.RotationV1alpha1().TrustConsumers().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tc
}

func holds(tc *rotationv1alpha1.TrustConsumer) map[string][]string {
	out := map[string][]string{}
	for _, h := range tc.Status.Holds {
		out[h.CertificateAuthority] = h.Fingerprints
	}
	return out
}

func sorted(s ...string) []string {
	slices.Sort(s)
	return s
}

// execCounter stands in for sh -c: it counts runs and fails while fail is
// set.
type execCounter struct {
	mu   sync.Mutex
	runs int
	fail bool
}

func (e *execCounter) run(context.Context, string) ([]byte, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.runs++
	if e.fail {
		return []byte("reload failed"), errors.New("exit status 1")
	}
	return nil, nil
}

func (e *execCounter) count() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.runs
}

func TestValidate(t *testing.T) {
	many := make([]string, MaxCAs+1)
	for i := range many {
		many[i] = "ca" + string(rune('a'+i))
	}
	for name, tc := range map[string]struct {
		o    Options
		want string
	}{
		"ok":              {Options{Consumer: "kube-apiserver.node-1", File: "/f", CAs: []string{"a"}}, ""},
		"no consumer":     {Options{File: "/f", CAs: []string{"a"}}, "--consumer is required"},
		"bad consumer":    {Options{Consumer: "Kube_APIServer", File: "/f", CAs: []string{"a"}}, `--consumer "Kube_APIServer" is not a valid TrustConsumer name`},
		"no file":         {Options{Consumer: "c", CAs: []string{"a"}}, "--file is required"},
		"no CA":           {Options{Consumer: "c", File: "/f"}, "--ca is required"},
		"a CA twice":      {Options{Consumer: "c", File: "/f", CAs: []string{"a", "a"}}, `--ca "a" is given twice`},
		"a bad CA name":   {Options{Consumer: "c", File: "/f", CAs: []string{"A B"}}, `--ca "A B" is not a valid`},
		"too many CAs":    {Options{Consumer: "c", File: "/f", CAs: many}, "at most 16"},
		"empty include":   {Options{Consumer: "c", File: "/f", CAs: []string{"a"}, Include: []string{""}}, "--include must name a file"},
		"negative resync": {Options{Consumer: "c", File: "/f", CAs: []string{"a"}, Resync: -time.Second}, "--resync"},
	} {
		err := tc.o.Validate()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: %v, want %q", name, err, tc.want)
		}
	}
}

// The file is the included certificates first, then each CA's bundle in
// flag order, each certificate once.
func TestUnionOrderAndDedup(t *testing.T) {
	x, y, a, b := newCA(t, "x"), newCA(t, "y"), newCA(t, "a"), newCA(t, "b")
	dir := t.TempDir()
	include := filepath.Join(dir, "fixed.pem")
	if err := os.WriteFile(include, append(x.CertPEM(), y.CertPEM()...), 0o600); err != nil {
		t.Fatal(err)
	}
	client := fake.NewSimpleClientset(caObject("ca1", y, a), caObject("ca2", a, b))
	s := &Syncer{Options: Options{Consumer: "c", File: filepath.Join(dir, "ca.crt"), CAs: []string{"ca2", "ca1"}, Include: []string{include}}, Client: client}
	if err := s.Once(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got, want := fileCerts(t, s.File), []string{"x", "y", "a", "b"}; !slices.Equal(got, want) {
		t.Fatalf("file holds %v, want %v", got, want)
	}
	// Included certificates that a CA's bundle also holds count for the CA.
	if got, want := holds(consumer(t, client, "c")), map[string][]string{"ca1": sorted(fp(y), fp(a)), "ca2": sorted(fp(a), fp(b))}; !equalHolds(got, want) {
		t.Fatalf("holds %v, want %v", got, want)
	}
}

func equalHolds(a, b map[string][]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

// A pass that would write the same bytes leaves the file alone (same
// inode, same time) and runs nothing; a change replaces it, mode 0644,
// and runs --exec once.
func TestUnchangedContentIsNotRewritten(t *testing.T) {
	a, next := newCA(t, "a"), newCA(t, "next")
	client := fake.NewSimpleClientset(caObject("ca", a))
	file := filepath.Join(t.TempDir(), "ca.crt")
	ex := &execCounter{}
	s := &Syncer{Options: Options{Consumer: "c", File: file, CAs: []string{"ca"}, Exec: "reload"}, Client: client, runExec: ex.run}
	ctx := context.Background()
	if err := s.Once(ctx); err != nil {
		t.Fatal(err)
	}
	info := stat(t, file)
	if info.Mode().Perm() != 0o644 || ex.count() != 1 {
		t.Fatalf("mode %v, --exec run %d times; want 0644 and once", info.Mode().Perm(), ex.count())
	}
	past := time.Now().Add(-time.Hour).Truncate(time.Second)
	if err := os.Chtimes(file, past, past); err != nil {
		t.Fatal(err)
	}
	client.ClearActions()
	if err := s.Once(ctx); err != nil {
		t.Fatal(err)
	}
	again := stat(t, file)
	if !again.ModTime().Equal(past) || inode(again) != inode(info) || ex.count() != 1 {
		t.Fatalf("unchanged content: mtime %s (was %s), inode %d (was %d), --exec %d runs", again.ModTime(), past, inode(again), inode(info), ex.count())
	}
	for _, act := range client.Actions() {
		if act.GetResource().Resource == "trustconsumers" {
			t.Fatalf("an unchanged report asked the server: %v", act)
		}
	}
	ca := caObject("ca", a, next)
	if _, err := client.RotationV1alpha1().CertificateAuthorities().Update(ctx, ca, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := s.Once(ctx); err != nil {
		t.Fatal(err)
	}
	if got := fileCerts(t, file); !slices.Equal(got, []string{"a", "next"}) || ex.count() != 2 || stat(t, file).Mode().Perm() != 0o644 {
		t.Fatalf("after the change: %v, --exec %d runs", got, ex.count())
	}
	if got := holds(consumer(t, client, "c"))["ca"]; !slices.Equal(got, sorted(fp(a), fp(next))) {
		t.Fatalf("reported %v", got)
	}
	if entries, _ := os.ReadDir(filepath.Dir(file)); len(entries) != 1 {
		t.Fatalf("temporary files left: %v", entries)
	}
}

func stat(t *testing.T, path string) os.FileInfo {
	t.Helper()
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

func inode(info os.FileInfo) uint64 { return info.Sys().(*syscall.Stat_t).Ino }

// While --exec fails after a change, the report waits (the consumer may
// not have loaded the file) and the next pass runs it again.
func TestFailedExecHoldsTheReportBack(t *testing.T) {
	a, next := newCA(t, "a"), newCA(t, "next")
	client := fake.NewSimpleClientset(caObject("ca", a))
	file := filepath.Join(t.TempDir(), "ca.crt")
	ex := &execCounter{}
	s := &Syncer{Options: Options{Consumer: "c", File: file, CAs: []string{"ca"}, Exec: "reload"}, Client: client, runExec: ex.run}
	ctx := context.Background()
	if err := s.Once(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := client.RotationV1alpha1().CertificateAuthorities().Update(ctx, caObject("ca", a, next), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	ex.fail = true
	if err := s.Once(ctx); err == nil || !strings.Contains(err.Error(), "reload failed") {
		t.Fatalf("a failed --exec: %v", err)
	}
	if got := holds(consumer(t, client, "c"))["ca"]; !slices.Equal(got, []string{fp(a)}) {
		t.Fatalf("reported %v while --exec failed, want the old report", got)
	}
	ex.fail = false
	if err := s.Once(ctx); err != nil {
		t.Fatal(err)
	}
	if got := holds(consumer(t, client, "c"))["ca"]; !slices.Equal(got, sorted(fp(a), fp(next))) || ex.count() != 3 {
		t.Fatalf("after --exec succeeded: reported %v, %d runs", got, ex.count())
	}
}

// The consumer is created with the CA list, and its spec follows the
// flags; a create that loses a race reads the winner's object.
func TestConsumerCreatedThenSpecUpdated(t *testing.T) {
	a, b := newCA(t, "a"), newCA(t, "b")
	client := fake.NewSimpleClientset(caObject("ca1", a), caObject("ca2", b))
	file := filepath.Join(t.TempDir(), "ca.crt")
	ctx := context.Background()
	s := &Syncer{Options: Options{Consumer: "c", File: file, CAs: []string{"ca1"}}, Client: client}
	if err := s.Once(ctx); err != nil {
		t.Fatal(err)
	}
	if tc := consumer(t, client, "c"); !slices.Equal(tc.Spec.CertificateAuthorities, []string{"ca1"}) {
		t.Fatalf("created with %v", tc.Spec.CertificateAuthorities)
	}
	s = &Syncer{Options: Options{Consumer: "c", File: file, CAs: []string{"ca1", "ca2"}}, Client: client}
	if err := s.Once(ctx); err != nil {
		t.Fatal(err)
	}
	tc := consumer(t, client, "c")
	if !slices.Equal(tc.Spec.CertificateAuthorities, []string{"ca1", "ca2"}) {
		t.Fatalf("spec not updated: %v", tc.Spec.CertificateAuthorities)
	}
	if got, want := holds(tc), map[string][]string{"ca1": {fp(a)}, "ca2": {fp(b)}}; !equalHolds(got, want) {
		t.Fatalf("holds %v, want %v", got, want)
	}

	// The race: the Get says missing, the create finds it made.
	raced := fake.NewSimpleClientset(caObject("ca1", a))
	raced.PrependReactor("create", "trustconsumers", func(action k8stesting.Action) (bool, runtime.Object, error) {
		obj := action.(k8stesting.CreateAction).GetObject().(*rotationv1alpha1.TrustConsumer).DeepCopy()
		if err := raced.Tracker().Add(obj); err != nil {
			return true, nil, err
		}
		return true, nil, apierrors.NewAlreadyExists(rotationv1alpha1.Resource("trustconsumers"), obj.Name)
	})
	s = &Syncer{Options: Options{Consumer: "c", File: filepath.Join(t.TempDir(), "ca.crt"), CAs: []string{"ca1"}}, Client: raced}
	if err := s.Once(ctx); err != nil {
		t.Fatalf("after losing the create race: %v", err)
	}
	if got := holds(consumer(t, raced, "c"))["ca1"]; !slices.Equal(got, []string{fp(a)}) {
		t.Fatalf("reported %v after the race", got)
	}
}

// A CA that does not exist has nothing in the file and no report; the
// others are written and reported (and the pass says which CA is
// missing). With no certificate at all, nothing is written.
func TestMissingCAIsLeftOut(t *testing.T) {
	a := newCA(t, "a")
	client := fake.NewSimpleClientset(caObject("ca1", a))
	file := filepath.Join(t.TempDir(), "ca.crt")
	s := &Syncer{Options: Options{Consumer: "c", File: file, CAs: []string{"missing", "ca1"}}, Client: client}
	if err := s.Once(context.Background()); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("a missing CA: %v", err)
	}
	if got := fileCerts(t, file); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("file holds %v", got)
	}
	if got, want := holds(consumer(t, client, "c")), map[string][]string{"ca1": {fp(a)}}; !equalHolds(got, want) {
		t.Fatalf("holds %v, want %v", got, want)
	}
	empty := filepath.Join(t.TempDir(), "ca.crt")
	s = &Syncer{Options: Options{Consumer: "d", File: empty, CAs: []string{"missing"}}, Client: client}
	if err := s.Once(context.Background()); err == nil {
		t.Fatal("nothing to write, and no error")
	}
	if _, err := os.Stat(empty); !os.IsNotExist(err) {
		t.Fatalf("an empty bundle was written: %v", err)
	}
}

// PEM files are capped before they are parsed.
func TestOversizedIncludeRefused(t *testing.T) {
	a := newCA(t, "a")
	dir := t.TempDir()
	big := filepath.Join(dir, "big.pem")
	if err := os.WriteFile(big, bytes.Repeat(a.CertPEM(), maxFileBytes/len(a.CertPEM())+1), 0o600); err != nil {
		t.Fatal(err)
	}
	s := &Syncer{Options: Options{Consumer: "c", File: filepath.Join(dir, "ca.crt"), CAs: []string{"ca"}, Include: []string{big}}, Client: fake.NewSimpleClientset(caObject("ca", a))}
	if err := s.Once(context.Background()); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("an oversized --include: %v", err)
	}
	// An oversized file where the bundle goes is replaced, not read.
	s.Include = nil
	if err := os.WriteFile(s.File, make([]byte, maxFileBytes+1), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := s.Once(context.Background()); err != nil {
		t.Fatalf("over an oversized file: %v", err)
	}
	if got := fileCerts(t, s.File); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("file holds %v", got)
	}
}

// Without --once, a change of a watched CA (the next CA added to its
// bundle) is written and reported.
func TestWatchFollowsTheCA(t *testing.T) {
	a, next, other := newCA(t, "a"), newCA(t, "next"), newCA(t, "other")
	client := fake.NewSimpleClientset(caObject("ca1", a), caObject("ca2", other))
	file := filepath.Join(t.TempDir(), "ca.crt")
	ex := &execCounter{}
	s := &Syncer{Options: Options{Consumer: "c", File: file, CAs: []string{"ca1", "ca2"}, Exec: "reload"}, Client: client, runExec: ex.run}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Watch(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Watch: %v", err)
		}
	}()
	eventually := func(what string, cond func() bool) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) { return cond(), nil }); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	reported := func(want map[string][]string) func() bool {
		return func() bool {
			tc, err := client.RotationV1alpha1().TrustConsumers().Get(ctx, "c", metav1.GetOptions{})
			return err == nil && equalHolds(holds(tc), want)
		}
	}
	eventually("the first report", reported(map[string][]string{"ca1": {fp(a)}, "ca2": {fp(other)}}))
	if got := fileCerts(t, file); !slices.Equal(got, []string{"a", "other"}) {
		t.Fatalf("file holds %v", got)
	}
	// Preparing: the next CA joins the bundle.
	if _, err := client.RotationV1alpha1().CertificateAuthorities().UpdateStatus(ctx, caObject("ca1", a, next), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually("the next CA not reported", reported(map[string][]string{"ca1": sorted(fp(a), fp(next)), "ca2": {fp(other)}}))
	if got := fileCerts(t, file); !slices.Equal(got, []string{"a", "next", "other"}) || ex.count() != 2 {
		t.Fatalf("file holds %v after %d --exec runs", got, ex.count())
	}
}

// Holds lists, per CA found, the fingerprints of its certificates the
// file holds, and no CA that was not found.
func TestHolds(t *testing.T) {
	a, b, c := newCA(t, "a"), newCA(t, "b"), newCA(t, "c")
	bundles := map[string][]*x509.Certificate{"ca1": {a.Cert, b.Cert}, "ca2": {c.Cert}}
	got := Holds([]string{"ca2", "missing", "ca1"}, bundles, sets.New(fp(a), fp(c)))
	want := []rotationv1alpha1.TrustHeld{{CertificateAuthority: "ca2", Fingerprints: []string{fp(c)}}, {CertificateAuthority: "ca1", Fingerprints: []string{fp(a)}}}
	if len(got) != len(want) || got[0].CertificateAuthority != "ca2" || !slices.Equal(got[0].Fingerprints, want[0].Fingerprints) || !slices.Equal(got[1].Fingerprints, want[1].Fingerprints) {
		t.Fatalf("holds %v, want %v", got, want)
	}
}

// The debt of a failed --exec outlives the process: a trust-sync started
// again (or --once run again) finds the file already written, yet runs
// --exec before it reports the new CA held (etcd reads its CA file only
// at start, so the file alone says nothing of what it trusts).
func TestExecDebtSurvivesARestart(t *testing.T) {
	a, next := newCA(t, "a"), newCA(t, "next")
	client := fake.NewSimpleClientset(caObject("ca", a))
	file := filepath.Join(t.TempDir(), "ca.crt")
	ex := &execCounter{}
	opts := Options{Consumer: "c", File: file, CAs: []string{"ca"}, Exec: "reload"}
	ctx := context.Background()
	if err := (&Syncer{Options: opts, Client: client, runExec: ex.run}).Once(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := client.RotationV1alpha1().CertificateAuthorities().Update(ctx, caObject("ca", a, next), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	ex.fail = true
	if err := (&Syncer{Options: opts, Client: client, runExec: ex.run}).Once(ctx); err == nil {
		t.Fatal("a failed --exec, and no error")
	}
	if got := fileCerts(t, file); !slices.Equal(got, []string{"a", "next"}) {
		t.Fatalf("file holds %v", got)
	}
	if _, err := os.Stat(file + ExecPendingSuffix); err != nil {
		t.Fatalf("no marker of the --exec owed: %v", err)
	}
	// Restarted, --exec still failing: still owed, the report still waits.
	if err := (&Syncer{Options: opts, Client: client, runExec: ex.run}).Once(ctx); err == nil || ex.count() != 3 {
		t.Fatalf("restarted with --exec owed and failing: %v after %d runs, want an error after 3", err, ex.count())
	}
	if got := holds(consumer(t, client, "c"))["ca"]; !slices.Equal(got, []string{fp(a)}) {
		t.Fatalf("reported %v while --exec owed fails, want the old report", got)
	}
	// Restarted, --exec succeeding: run, then reported, the marker gone.
	ex.fail = false
	if err := (&Syncer{Options: opts, Client: client, runExec: ex.run}).Once(ctx); err != nil || ex.count() != 4 {
		t.Fatalf("restarted with --exec owed: %v after %d runs, want 4", err, ex.count())
	}
	if got := holds(consumer(t, client, "c"))["ca"]; !slices.Equal(got, sorted(fp(a), fp(next))) {
		t.Fatalf("reported %v", got)
	}
	if _, err := os.Stat(file + ExecPendingSuffix); !os.IsNotExist(err) {
		t.Fatalf("the marker stays after --exec succeeded: %v", err)
	}
	// Paid: another start runs nothing.
	if err := (&Syncer{Options: opts, Client: client, runExec: ex.run}).Once(ctx); err != nil || ex.count() != 4 {
		t.Fatalf("nothing owed: %v after %d runs, want 4", err, ex.count())
	}
}

// The marker is written before the file: when it cannot be, the file is
// not changed (else a crash in between would leave a changed file and no
// --exec owed).
func TestExecMarkerBeforeTheFile(t *testing.T) {
	a := newCA(t, "a")
	file := filepath.Join(t.TempDir(), "ca.crt")
	// A non-empty directory where the marker goes: no file renames over it.
	if err := os.MkdirAll(filepath.Join(file+ExecPendingSuffix, "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	ex := &execCounter{}
	s := &Syncer{Options: Options{Consumer: "c", File: file, CAs: []string{"ca"}, Exec: "reload"}, Client: fake.NewSimpleClientset(caObject("ca", a)), runExec: ex.run}
	if err := s.Once(context.Background()); err == nil {
		t.Fatal("the marker could not be written, and no error")
	}
	if _, err := os.Stat(file); !os.IsNotExist(err) {
		t.Fatalf("the file was written without the marker: %v", err)
	}
}

// A marker left by a run with --exec, when --exec is no longer given, is
// owed to nothing: removed, nothing run.
func TestStaleMarkerWithoutExec(t *testing.T) {
	a := newCA(t, "a")
	file := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(file+ExecPendingSuffix, []byte("reload\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	client := fake.NewSimpleClientset(caObject("ca", a))
	s := &Syncer{Options: Options{Consumer: "c", File: file, CAs: []string{"ca"}}, Client: client}
	if err := s.Once(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(file + ExecPendingSuffix); !os.IsNotExist(err) {
		t.Fatalf("the stale marker stays: %v", err)
	}
}

// --once fails naming a --ca that does not exist or has no bundle yet,
// after writing and reporting the others.
func TestOnceFailsNamingAMissingCA(t *testing.T) {
	a := newCA(t, "a")
	client := fake.NewSimpleClientset(caObject("ca1", a), caObject("empty"))
	file := filepath.Join(t.TempDir(), "ca.crt")
	err := (&Syncer{Options: Options{Consumer: "c", File: file, CAs: []string{"missing", "ca1", "empty"}}, Client: client}).Once(context.Background())
	if err == nil || !strings.Contains(err.Error(), `"missing"`) || !strings.Contains(err.Error(), `"empty"`) || strings.Contains(err.Error(), `"ca1"`) {
		t.Fatalf("--once with a missing CA and one without a bundle: %v", err)
	}
	if got := fileCerts(t, file); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("file holds %v", got)
	}
	if got, want := holds(consumer(t, client, "c")), map[string][]string{"ca1": {fp(a)}}; !equalHolds(got, want) {
		t.Fatalf("holds %v, want %v", got, want)
	}

	// Without --once, a missing CA is logged, not retried as a failure:
	// the others are kept, and the CA joins the file when it is created.
	b := newCA(t, "b")
	s := &Syncer{Options: Options{Consumer: "w", File: filepath.Join(t.TempDir(), "ca.crt"), CAs: []string{"ca1", "later"}}, Client: client}
	ctx, stop := watchInBackground(t, s)
	defer stop()
	eventually(t, ctx, "ca1 reported", reportedAs(ctx, client, "w", map[string][]string{"ca1": {fp(a)}}))
	if _, err := client.RotationV1alpha1().CertificateAuthorities().Create(ctx, caObject("later", b), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, ctx, "the created CA reported", reportedAs(ctx, client, "w", map[string][]string{"ca1": {fp(a)}, "later": {fp(b)}}))
}

// Without --once, the file is checked on a timer too: overwritten,
// deleted, or an --include changed, it is written again (and --exec run),
// without asking the server anything when the report stays the same.
func TestResyncRepairsTheFile(t *testing.T) {
	a, x, y := newCA(t, "a"), newCA(t, "x"), newCA(t, "y")
	dir := t.TempDir()
	include := filepath.Join(dir, "fixed.pem")
	if err := os.WriteFile(include, x.CertPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	client := fake.NewSimpleClientset(caObject("ca", a))
	file := filepath.Join(dir, "ca.crt")
	ex := &execCounter{}
	s := &Syncer{Options: Options{Consumer: "c", File: file, CAs: []string{"ca"}, Include: []string{include}, Exec: "reload", Resync: 20 * time.Millisecond}, Client: client, runExec: ex.run}
	ctx, stop := watchInBackground(t, s)
	defer stop()
	eventually(t, ctx, "the first report", reportedAs(ctx, client, "c", map[string][]string{"ca": {fp(a)}}))
	holdsNow := func(want ...string) func() bool {
		return func() bool {
			data, err := os.ReadFile(file)
			if err != nil {
				return false
			}
			certs, err := strictpem.Certificates(data, 16)
			if err != nil || len(certs) != len(want) {
				return false
			}
			for i, c := range certs {
				if c.Subject.CommonName != want[i] {
					return false
				}
			}
			return true
		}
	}
	eventually(t, ctx, "the file written", holdsNow("x", "a"))
	client.ClearActions()

	if err := os.WriteFile(file, y.CertPEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, ctx, "an overwritten file repaired", holdsNow("x", "a"))
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	eventually(t, ctx, "a deleted file repaired", holdsNow("x", "a"))
	if err := os.WriteFile(include, y.CertPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	eventually(t, ctx, "a changed --include written", holdsNow("y", "a"))
	eventually(t, ctx, "--exec after each repair", func() bool { return ex.count() >= 4 })
	for _, act := range client.Actions() {
		if act.GetVerb() != "watch" {
			t.Fatalf("a resync with the same report asked the server: %v", act)
		}
	}
}

// A file that cannot be written is reported as what it holds: overwritten
// by someone else without the CA, the consumer no longer claims it. While
// --exec is owed, such a report only takes away.
func TestUnwritableFileReportedAsItIs(t *testing.T) {
	a, next, other := newCA(t, "a"), newCA(t, "next"), newCA(t, "other")
	client := fake.NewSimpleClientset(caObject("ca", a))
	file := filepath.Join(t.TempDir(), "ca.crt")
	var writeErr error
	s := &Syncer{Options: Options{Consumer: "c", File: file, CAs: []string{"ca"}}, Client: client,
		writeFile: func(path string, data []byte, mode os.FileMode) error {
			if writeErr != nil && path == file {
				return writeErr
			}
			return pki.WriteFileAtomic(path, data, mode)
		}}
	ctx := context.Background()
	if err := s.Once(ctx); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, other.CertPEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	writeErr = errors.New("read-only file system")
	if err := s.Once(ctx); err == nil || !strings.Contains(err.Error(), "read-only") {
		t.Fatalf("an unwritable file: %v", err)
	}
	if got := holds(consumer(t, client, "c")); !equalHolds(got, map[string][]string{"ca": nil}) {
		t.Fatalf("reported %v for a file without the CA, want nothing held", got)
	}
	writeErr = nil
	if err := s.Once(ctx); err != nil {
		t.Fatal(err)
	}
	if got := holds(consumer(t, client, "c"))["ca"]; !slices.Equal(got, []string{fp(a)}) {
		t.Fatalf("reported %v after the file was written again", got)
	}

	// --exec owed (the next CA written, the command failing), then the
	// file overwritten with the next CA only and unwritable: the next CA
	// is not claimed (the consumer may not have loaded it), a is dropped.
	ex := &execCounter{fail: true}
	s.Exec, s.runExec = "reload", ex.run
	if _, err := client.RotationV1alpha1().CertificateAuthorities().Update(ctx, caObject("ca", a, next), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := s.Once(ctx); err == nil {
		t.Fatal("a failed --exec, and no error")
	}
	if err := os.WriteFile(file, next.CertPEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	writeErr = errors.New("read-only file system")
	if err := s.Once(ctx); err == nil {
		t.Fatal("an unwritable file, and no error")
	}
	if got := holds(consumer(t, client, "c")); !equalHolds(got, map[string][]string{"ca": nil}) {
		t.Fatalf("reported %v while --exec is owed, want nothing held", got)
	}
}

func watchInBackground(t *testing.T, s *Syncer) (context.Context, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Watch(ctx) }()
	return ctx, func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Watch: %v", err)
		}
	}
}

func eventually(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) { return cond(), nil }); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func reportedAs(ctx context.Context, client *fake.Clientset, name string, want map[string][]string) func() bool {
	return func() bool {
		tc, err := client.RotationV1alpha1().TrustConsumers().Get(ctx, name, metav1.GetOptions{})
		return err == nil && equalHolds(holds(tc), want)
	}
}

// TestASquattedConsumerIsFoundAtOnce: a consumer of this name that another
// user registered, already reporting what the file holds, is not silently
// taken for ours: the first report of a process is written even then, and
// the server's refusal (only the reporter writes) fails the pass naming
// who registered it.
func TestASquattedConsumerIsFoundAtOnce(t *testing.T) {
	a := newCA(t, "a")
	file := filepath.Join(t.TempDir(), "ca.crt")
	squatted := &rotationv1alpha1.TrustConsumer{ObjectMeta: metav1.ObjectMeta{Name: "kube-apiserver-cp1"},
		Spec:   rotationv1alpha1.TrustConsumerSpec{CertificateAuthorities: []string{"ca"}, Reporter: "system:node:mallory"},
		Status: rotationv1alpha1.TrustConsumerStatus{Holds: []rotationv1alpha1.TrustHeld{{CertificateAuthority: "ca", Fingerprints: []string{fp(a)}}}}}
	client := fake.NewSimpleClientset(caObject("ca", a), squatted)
	// What the TrustConsumer admission plugin answers anyone but the reporter.
	client.PrependReactor("update", "trustconsumers", func(action k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(rotationv1alpha1.Resource("trustconsumers"), "kube-apiserver-cp1", errors.New(`only "system:node:mallory" may report for it`))
	})
	s := &Syncer{Options: Options{Consumer: "kube-apiserver-cp1", File: file, CAs: []string{"ca"}}, Client: client}
	err := s.Once(context.Background())
	if err == nil || !strings.Contains(err.Error(), `registered by "system:node:mallory"`) {
		t.Fatalf("err %v; want the pass to fail naming who registered the consumer", err)
	}
}
