// Package trustsync keeps a trust bundle file for a trust consumer
// (kube-apiserver's --client-ca-file, a kubelet's clientCAFile, etcd's
// --trusted-ca-file): the union of some CertificateAuthorities' trust
// bundles and fixed certificates, written atomically, and reports to rekey,
// as TrustConsumer NAME, which certificates of each CA the file holds. A
// rotation of those CAs stays Preparing (the old CA signing) until every
// consumer reports holding the new CA: this is how a consumer says so.
// It is `rekey-agent trust-sync`.
package trustsync

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"slices"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"

	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
	"rekey.io/rekey/pkg/pki"
	"rekey.io/rekey/pkg/signing"
	"rekey.io/rekey/pkg/strictpem"
)

const (
	// MaxCAs is how many CAs one consumer may name (the API's limit).
	MaxCAs = 16
	// maxFileBytes caps every PEM read (an --include file, the file kept,
	// a CA's bundle) before it is parsed.
	maxFileBytes = 1 << 20
	// maxCertificates caps the certificates of one PEM source.
	maxCertificates = 64
	// maxFingerprints is how many fingerprints one report per CA may hold
	// (the API's limit); a CA's bundle has two or three.
	maxFingerprints = 8
	// ExecTimeout bounds one run of --exec.
	ExecTimeout = 2 * time.Minute
)

// Options are trust-sync's flags.
type Options struct {
	// Consumer is the TrustConsumer's name.
	Consumer string
	// File is the bundle file kept.
	File string
	// CAs are the CertificateAuthorities whose bundles the file holds.
	CAs []string
	// Include are PEM files of fixed certificates written first.
	Include []string
	// Exec is run with sh -c after the file changed.
	Exec string
	// Once does one pass and returns.
	Once bool
	// Resync is how often, without Once, a pass is made with no CA
	// change (jittered up to a fifth more): a file overwritten or deleted
	// by someone else, or a changed --include, is repaired within it.
	// Zero: only on CA changes.
	Resync time.Duration
}

// ExecPendingSuffix names the marker beside the file that says --exec is
// owed: written (atomically) before a changed file is renamed into place,
// removed only after --exec succeeded. A trust-sync started again (a
// restart, --once run again) that finds it runs --exec before reporting:
// the file alone does not say what a component that reads it only at
// start (etcd) has loaded.
const ExecPendingSuffix = ".exec-pending"

// Validate checks the options without asking the server: a name the
// server would refuse is named here, with the flag.
func (o *Options) Validate() error {
	var errs []error
	if o.Consumer == "" {
		errs = append(errs, errors.New("--consumer is required"))
	} else if msgs := validation.IsDNS1123Subdomain(o.Consumer); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("--consumer %q is not a valid TrustConsumer name (a DNS subdomain: lowercase letters, digits, '-' and '.'): %v", o.Consumer, msgs))
	}
	if o.File == "" {
		errs = append(errs, errors.New("--file is required"))
	}
	switch {
	case len(o.CAs) == 0:
		errs = append(errs, errors.New("--ca is required (at least one CertificateAuthority)"))
	case len(o.CAs) > MaxCAs:
		errs = append(errs, fmt.Errorf("--ca is given %d times; a consumer names at most %d CertificateAuthorities", len(o.CAs), MaxCAs))
	}
	seen := sets.New[string]()
	for _, ca := range o.CAs {
		if msgs := validation.IsDNS1123Subdomain(ca); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("--ca %q is not a valid CertificateAuthority name: %v", ca, msgs))
		}
		if seen.Has(ca) {
			errs = append(errs, fmt.Errorf("--ca %q is given twice", ca))
		}
		seen.Insert(ca)
	}
	for _, f := range o.Include {
		if f == "" {
			errs = append(errs, errors.New("--include must name a file"))
		}
	}
	if o.Resync < 0 {
		errs = append(errs, fmt.Errorf("--resync %s must not be negative (0: only on CA changes)", o.Resync))
	}
	return errors.Join(errs...)
}

// Syncer keeps one file and reports for one consumer.
type Syncer struct {
	Options
	Client clientset.Interface

	// reporter registers the consumer and reports for it (made at the
	// first report).
	reporter *Reporter
	// runExec runs --exec; nil runs it with sh -c (tests replace it).
	runExec func(ctx context.Context, command string) ([]byte, error)
	// writeFile writes a file atomically; nil is pki.WriteFileAtomic (tests
	// make it fail).
	writeFile func(path string, data []byte, mode os.FileMode) error
}

// MissingCA is a --ca the file holds nothing of, and why.
type MissingCA struct {
	Name string
	Why  string
}

// IncompleteError is what a pass returns after writing and reporting the
// CAs it has when some --ca does not exist or has no trust bundle yet:
// --once exits non-zero with it; watching, it is logged, not retried (the
// watch brings the CA when it comes).
type IncompleteError struct {
	Missing []MissingCA
}

func (e *IncompleteError) Error() string {
	var b bytes.Buffer
	for i, m := range e.Missing {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "CertificateAuthority %q %s", m.Name, m.Why)
	}
	b.WriteString(": the file holds nothing of it")
	return b.String()
}

// Run keeps the file and the report current until ctx is done (or, with
// Once, does one pass and returns its error).
func Run(ctx context.Context, client clientset.Interface, o Options) error {
	if err := o.Validate(); err != nil {
		return err
	}
	s := &Syncer{Options: o, Client: client}
	if o.Once {
		return s.Once(ctx)
	}
	return s.Watch(ctx)
}

// Once reads every CA, writes the file if it changed, runs --exec and
// reports: one pass. A CA that cannot be read fails the pass before
// anything is written (leaving it out would drop from the file a CA that
// exists, the one that signs among them); one that does not exist is
// left out, and named in the *IncompleteError returned.
func (s *Syncer) Once(ctx context.Context) error {
	cas := make(map[string]*rotationv1alpha1.CertificateAuthority, len(s.CAs))
	for _, name := range s.CAs {
		ca, err := s.Client.RotationV1alpha1().CertificateAuthorities().Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("reading CertificateAuthority %s: %w", name, err)
		}
		cas[name] = ca
	}
	return s.Sync(ctx, cas)
}

// Watch watches each CA (a get, then a watch by name from its
// resourceVersion, re-established with backoff) and makes a pass on every
// change, retrying a failed pass with backoff, until ctx is done.
func (s *Syncer) Watch(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	var mu sync.Mutex
	cas := map[string]*rotationv1alpha1.CertificateAuthority{}
	seen := sets.New[string]()
	changed := make(chan struct{}, 1)
	notify := func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for _, name := range s.CAs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			WatchCA(ctx, s.Client, name, func(ca *rotationv1alpha1.CertificateAuthority) {
				mu.Lock()
				if ca == nil {
					delete(cas, name)
				} else {
					cas[name] = ca
				}
				seen.Insert(name)
				mu.Unlock()
				notify()
			})
		}()
	}
	backoff := retryBackoff()
	// retry is set after a failed pass, resync after a good one: a
	// failing consumer (the server down, say) asks at the backoff's pace,
	// not at the resync's.
	var retry, resync <-chan time.Time
	lastMissing := ""
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		case <-retry:
		case <-resync:
		}
		mu.Lock()
		// Until every CA was read once (found or not), a pass would drop
		// what the file holds of the others.
		ready := seen.Len() == len(s.CAs)
		snapshot := make(map[string]*rotationv1alpha1.CertificateAuthority, len(cas))
		for k, v := range cas {
			snapshot[k] = v
		}
		mu.Unlock()
		if !ready {
			continue
		}
		err := s.Sync(ctx, snapshot)
		missing := ""
		if incomplete := (*IncompleteError)(nil); errors.As(err, &incomplete) {
			missing, err = incomplete.Error(), nil
		}
		if missing != lastMissing {
			// Logged when it changes, not at every pass.
			if missing != "" {
				logger.Info("Trust bundle written without some CertificateAuthorities; waiting for them", "consumer", s.Consumer, "file", s.File, "missing", missing)
			}
			lastMissing = missing
		}
		if err != nil {
			delay := backoff.Step()
			logger.Error(err, "Trust bundle not synced; retrying", "consumer", s.Consumer, "file", s.File, "in", delay)
			retry, resync = time.After(delay), nil
			continue
		}
		backoff = retryBackoff()
		retry = nil
		if s.Resync > 0 {
			// Jittered: consumers started together do not check together.
			resync = time.After(wait.Jitter(s.Resync, 0.2))
		}
	}
}

// retryBackoff is the wait after a failed pass: 1s doubling to 5m,
// jittered (consumers failing together do not retry together).
func retryBackoff() wait.Backoff {
	return wait.Backoff{Duration: time.Second, Factor: 2, Jitter: 0.5, Cap: 5 * time.Minute, Steps: math.MaxInt32}
}

// watchBackoff is the wait before watching a CA again: 1s doubling to a
// minute while the watch cannot be established.
func watchBackoff() wait.Backoff {
	return wait.Backoff{Duration: time.Second, Factor: 2, Jitter: 0.5, Cap: time.Minute, Steps: math.MaxInt32}
}

// WatchCA calls set with the CA named name (nil while it does not exist)
// after a get and at every change, until ctx is done. set is called from
// one goroutine, in the order of the server's changes; a watch that ends
// is established again (with a get first) with backoff.
func WatchCA(ctx context.Context, client clientset.Interface, name string, set func(*rotationv1alpha1.CertificateAuthority)) {
	logger := klog.FromContext(ctx).WithValues("certificateAuthority", name)
	backoff := watchBackoff()
	cas := client.RotationV1alpha1().CertificateAuthorities()
	for ctx.Err() == nil {
		err := func() error {
			ca, err := cas.Get(ctx, name, metav1.GetOptions{})
			rv := ""
			switch {
			case apierrors.IsNotFound(err):
				// Watched from now: its creation arrives as an event.
				set(nil)
			case err != nil:
				return err
			default:
				rv = ca.ResourceVersion
				set(ca)
			}
			w, err := cas.Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String(), ResourceVersion: rv})
			if err != nil {
				return err
			}
			defer w.Stop()
			backoff = watchBackoff()
			for {
				var ev watch.Event
				var open bool
				select {
				case <-ctx.Done():
					return nil
				case ev, open = <-w.ResultChan():
				}
				if !open {
					return nil
				}
				switch ev.Type {
				case watch.Added, watch.Modified, watch.Deleted:
					ca, ok := ev.Object.(*rotationv1alpha1.CertificateAuthority)
					if !ok || ca.Name != name {
						// The server selects by name; a stray object
						// would stand for this CA.
						continue
					}
					if ev.Type == watch.Deleted {
						ca = nil
					}
					set(ca)
				case watch.Error:
					// An expired resourceVersion, say: get again.
					return apierrors.FromObject(ev.Object)
				}
			}
		}()
		if err != nil {
			logger.Info("Watching the CertificateAuthority failed; again with backoff", "err", err.Error())
		}
		select {
		case <-ctx.Done():
		case <-time.After(backoff.Step()):
		}
	}
}

// Sync writes the file from cas (the CAs found; a CA missing has nothing
// in the file and no report), runs --exec after a change (or when a
// marker says it is owed) and reports. When the file cannot be written,
// it reports what the file holds instead (lowered only, with --exec) and
// fails. With a CA missing, it returns an *IncompleteError after the
// report.
func (s *Syncer) Sync(ctx context.Context, cas map[string]*rotationv1alpha1.CertificateAuthority) error {
	logger := klog.FromContext(ctx).WithValues("consumer", s.Consumer, "file", s.File)
	bundles := map[string][]*x509.Certificate{}
	var sources [][]*x509.Certificate
	for _, path := range s.Include {
		data, err := readCapped(path)
		if err != nil {
			return fmt.Errorf("--include: %w", err)
		}
		certs, err := strictpem.Certificates(data, maxCertificates)
		if err != nil {
			return fmt.Errorf("--include %s: %w", path, err)
		}
		sources = append(sources, certs)
	}
	var missing []MissingCA
	for _, name := range s.CAs {
		ca := cas[name]
		if ca == nil {
			missing = append(missing, MissingCA{Name: name, Why: "not found"})
			continue
		}
		if ca.Status.TrustBundle == "" {
			missing = append(missing, MissingCA{Name: name, Why: "has no trust bundle yet"})
			continue
		}
		if len(ca.Status.TrustBundle) > maxFileBytes {
			return fmt.Errorf("CertificateAuthority %s: the trust bundle is larger than %d bytes", name, maxFileBytes)
		}
		certs, err := strictpem.Certificates([]byte(ca.Status.TrustBundle), maxCertificates)
		if err != nil {
			return fmt.Errorf("CertificateAuthority %s: trust bundle: %w", name, err)
		}
		bundles[name] = certs
		sources = append(sources, certs)
	}
	content := Union(sources...)
	if len(content) == 0 {
		msg := "no --include"
		if len(missing) > 0 {
			msg += ", and " + (&IncompleteError{Missing: missing}).Error()
		}
		return fmt.Errorf("no certificate to write yet: %s", msg)
	}
	owed, err := s.execOwed(ctx)
	if err != nil {
		return err
	}
	old, err := readCapped(s.File)
	if err != nil && !errors.Is(err, os.ErrNotExist) && !errors.Is(err, errTooLarge) {
		// An oversized file is not ours: it is replaced.
		return err
	}
	if !bytes.Equal(old, content) {
		if err := s.write(content); err != nil {
			// The file holds something else (someone else's content, or
			// nothing), and the consumer may load it: the report must not
			// say more than that.
			if rerr := s.reportFile(ctx, old, bundles); rerr != nil {
				err = errors.Join(err, rerr)
			}
			return err
		}
		logger.Info("Trust bundle written", "certificates", bytes.Count(content, []byte("-----BEGIN ")))
		owed = s.Exec != ""
	}
	if owed {
		if err := s.exec(ctx); err != nil {
			// The report waits: the consumer (which --exec tells to load
			// the file) may not hold what the file holds. The marker
			// keeps the debt across a restart.
			return err
		}
		if err := os.Remove(s.marker()); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("removing %s after --exec succeeded: %w", s.marker(), err)
		}
	}
	held, err := fileFingerprints(content)
	if err != nil {
		return err
	}
	if err := s.report(ctx, Holds(s.CAs, bundles, held), false); err != nil {
		return err
	}
	if len(missing) > 0 {
		return &IncompleteError{Missing: missing}
	}
	return nil
}

// marker is the file that says --exec is owed.
func (s *Syncer) marker() string { return s.File + ExecPendingSuffix }

// execOwed says whether the marker is there. Without --exec, a marker (a
// run with --exec left it) is owed to nothing: it is removed.
func (s *Syncer) execOwed(ctx context.Context) (bool, error) {
	_, err := os.Lstat(s.marker())
	switch {
	case errors.Is(err, os.ErrNotExist):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("checking whether --exec is owed: %w", err)
	case s.Exec != "":
		return true, nil
	}
	if err := os.Remove(s.marker()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return false, fmt.Errorf("removing %s (no --exec is given): %w", s.marker(), err)
	}
	klog.FromContext(ctx).Info("Removed the marker of an --exec owed: no --exec is given", "consumer", s.Consumer, "marker", s.marker())
	return false, nil
}

// write replaces the file with content; with --exec, the marker that
// says --exec is owed is written first, so that a crash between the two
// cannot leave a changed file and no debt.
func (s *Syncer) write(content []byte) error {
	write := s.writeFile
	if write == nil {
		write = pki.WriteFileAtomic
	}
	if s.Exec != "" {
		if err := write(s.marker(), []byte(s.Exec+"\n"), 0o600); err != nil {
			return fmt.Errorf("recording that --exec is owed, before changing the file: %w", err)
		}
	}
	return write(s.File, content, 0o644)
}

// reportFile reports what old, the file as read, holds of each CA
// (nothing, when it is missing or does not parse). With --exec, what the
// consumer loaded is not known from the file: the report is only lowered
// (what the file holds and the last report both have).
func (s *Syncer) reportFile(ctx context.Context, old []byte, bundles map[string][]*x509.Certificate) error {
	held, err := fileFingerprints(old)
	if err != nil {
		held = sets.New[string]()
	}
	return s.report(ctx, Holds(s.CAs, bundles, held), s.Exec != "")
}

// exec runs --exec with sh -c within ExecTimeout.
func (s *Syncer) exec(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, ExecTimeout)
	defer cancel()
	run := s.runExec
	if run == nil {
		run = runShell
	}
	out, err := run(ctx, s.Exec)
	if err != nil {
		if len(out) > 4096 {
			out = out[len(out)-4096:]
		}
		return fmt.Errorf("--exec %q after the file changed: %w (output: %q)", s.Exec, err, out)
	}
	klog.FromContext(ctx).Info("Ran --exec after the file changed", "consumer", s.Consumer, "command", s.Exec)
	return nil
}

func runShell(ctx context.Context, command string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "sh", "-c", command)
	// A child that keeps the output open does not hold the wait past
	// the timeout.
	cmd.WaitDelay = 5 * time.Second
	return cmd.CombinedOutput()
}

// Union is the PEM of every certificate of sources, in order, each DER
// once (the first time it appears).
func Union(sources ...[]*x509.Certificate) []byte {
	var out []byte
	seen := sets.New[string]()
	for _, certs := range sources {
		for _, c := range certs {
			if seen.Has(string(c.Raw)) {
				continue
			}
			seen.Insert(string(c.Raw))
			out = append(out, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})...)
		}
	}
	return out
}

// fileFingerprints are the fingerprints of the certificates in content.
func fileFingerprints(content []byte) (sets.Set[string], error) {
	certs, err := strictpem.Certificates(content, (MaxCAs+1)*maxCertificates)
	if err != nil {
		return nil, fmt.Errorf("the written bundle: %w", err)
	}
	held := sets.New[string]()
	for _, c := range certs {
		held.Insert(signing.Fingerprint(c))
	}
	return held, nil
}

// Holds is the report: for each CA found (in flag order), the
// fingerprints of its bundle's certificates that held has, sorted, at
// most maxFingerprints (the bundle's first: the one that signs and the
// next or previous).
func Holds(names []string, bundles map[string][]*x509.Certificate, held sets.Set[string]) []rotationv1alpha1.TrustHeld {
	var holds []rotationv1alpha1.TrustHeld
	for _, name := range names {
		certs, ok := bundles[name]
		if !ok {
			continue
		}
		fps := sets.New[string]()
		for _, c := range certs {
			if fp := signing.Fingerprint(c); held.Has(fp) && fps.Len() < maxFingerprints {
				fps.Insert(fp)
			}
		}
		holds = append(holds, rotationv1alpha1.TrustHeld{CertificateAuthority: name, Fingerprints: sets.List(fps)})
	}
	return holds
}

// report reports holds through the Syncer's Reporter.
func (s *Syncer) report(ctx context.Context, holds []rotationv1alpha1.TrustHeld, lower bool) error {
	if s.reporter == nil {
		s.reporter = &Reporter{Client: s.Client, Consumer: s.Consumer, CAs: s.CAs, FieldManager: "rekey-agent-trust-sync",
			Needs: "trust-sync needs the rekey:trust-consumer ClusterRole, the verb trust on each --ca, and to be the user that registered the consumer"}
	}
	return s.reporter.Report(ctx, holds, lower)
}

// Reporter registers TrustConsumer Consumer, naming CAs, and reports, as
// its reporter, which certificates of each CA it holds. trust-sync and
// rekey-agent jwt-signer report through it. It is not safe for concurrent
// use.
type Reporter struct {
	Client   clientset.Interface
	Consumer string
	CAs      []string
	// FieldManager names the writer in the consumer's managedFields.
	FieldManager string
	// Needs says, in the error of a refused report, what the reporter's
	// user needs.
	Needs string

	// reported is what the server was last told or found to hold, per CA
	// (nil until the consumer was read): a report of the same asks
	// nothing.
	reported map[string][]string
	// claimed: a report of this process was accepted, so the consumer is
	// this user's.
	claimed bool
}

// Report makes the server's TrustConsumer name the CAs and hold holds:
// it is created when missing (and again after an operator deleted it: a
// consumer that runs is not gone), its spec updated when the CA list
// differs, its status when the holds do. Nothing is asked when holds is
// what was reported last. lower: report only what holds and the
// consumer's current report both have.
func (s *Reporter) Report(ctx context.Context, holds []rotationv1alpha1.TrustHeld, lower bool) error {
	want := map[string][]string{}
	for _, h := range holds {
		want[h.CertificateAuthority] = h.Fingerprints
	}
	if lower && s.reported != nil {
		want = intersect(want, s.reported)
	}
	if s.reported != nil && sameHolds(s.reported, want) {
		return nil
	}
	consumers := s.Client.RotationV1alpha1().TrustConsumers()
	// now is what the server holds once this returns.
	var now map[string][]string
	var owner string
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		tc, err := s.ensure(ctx)
		if err != nil {
			return err
		}
		now = want
		if lower {
			now = intersect(want, heldBy(tc))
		}
		// The first report of a process is written even when the
		// server holds it already: only a write says the consumer is this
		// user's (the server refuses anyone but its spec.reporter), so a
		// consumer of this name that someone else registered, and reports
		// for, is found at once instead of silently taken for ours.
		if sameHolds(heldBy(tc), now) && s.claimed {
			return nil
		}
		owner = tc.Spec.Reporter
		tc = tc.DeepCopy()
		// The server stamps reportTime on what changed.
		tc.Status.Holds = nil
		for _, h := range holds {
			tc.Status.Holds = append(tc.Status.Holds, rotationv1alpha1.TrustHeld{CertificateAuthority: h.CertificateAuthority, Fingerprints: now[h.CertificateAuthority]})
		}
		_, err = consumers.UpdateStatus(ctx, tc, metav1.UpdateOptions{FieldManager: s.FieldManager})
		if err == nil {
			klog.FromContext(ctx).Info("Reported the CA certificates held", "consumer", s.Consumer, "holds", tc.Status.Holds)
		}
		return err
	})
	if err != nil {
		s.reported = nil
		if apierrors.IsForbidden(err) && owner != "" {
			return fmt.Errorf("reporting for TrustConsumer %s, registered by %q: %w (if that is not this reporter's user, someone else holds the consumer's name: an operator must delete it)", s.Consumer, owner, s.hint(err))
		}
		return fmt.Errorf("reporting for TrustConsumer %s: %w", s.Consumer, s.hint(err))
	}
	s.reported = now
	s.claimed = true
	return nil
}

// Ensure returns the TrustConsumer, created with the CA list when missing
// and with its spec updated when the list differs. A reporter that must be
// waited for before it reports anything calls it first: a rotation's
// trust gate waits only for the consumers that exist.
func (s *Reporter) Ensure(ctx context.Context) (*rotationv1alpha1.TrustConsumer, error) {
	tc, err := s.ensure(ctx)
	if err != nil {
		return nil, fmt.Errorf("registering TrustConsumer %s: %w", s.Consumer, s.hint(err))
	}
	return tc, nil
}

func (s *Reporter) ensure(ctx context.Context) (*rotationv1alpha1.TrustConsumer, error) {
	consumers := s.Client.RotationV1alpha1().TrustConsumers()
	tc, err := consumers.Get(ctx, s.Consumer, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		tc, err = consumers.Create(ctx, &rotationv1alpha1.TrustConsumer{
			ObjectMeta: metav1.ObjectMeta{Name: s.Consumer},
			Spec:       rotationv1alpha1.TrustConsumerSpec{CertificateAuthorities: slices.Clone(s.CAs)},
		}, metav1.CreateOptions{FieldManager: s.FieldManager})
		if err == nil {
			klog.FromContext(ctx).Info("Registered the trust consumer", "consumer", s.Consumer, "certificateAuthorities", s.CAs)
		}
		if apierrors.IsAlreadyExists(err) {
			// Another reporter of this name, or a restart, was first.
			tc, err = consumers.Get(ctx, s.Consumer, metav1.GetOptions{})
		}
	}
	if err != nil {
		return nil, err
	}
	if !sets.New(tc.Spec.CertificateAuthorities...).Equal(sets.New(s.CAs...)) {
		tc = tc.DeepCopy()
		tc.Spec.CertificateAuthorities = slices.Clone(s.CAs)
		if tc, err = consumers.Update(ctx, tc, metav1.UpdateOptions{FieldManager: s.FieldManager}); err != nil {
			return nil, err
		}
		klog.FromContext(ctx).Info("Updated the trust consumer's CertificateAuthorities", "consumer", s.Consumer, "certificateAuthorities", s.CAs)
	}
	return tc, nil
}

// hint adds what a refusal most likely means.
func (s *Reporter) hint(err error) error {
	if apierrors.IsForbidden(err) && s.Needs != "" {
		return fmt.Errorf("%w (%s)", err, s.Needs)
	}
	return err
}

func heldBy(tc *rotationv1alpha1.TrustConsumer) map[string][]string {
	held := map[string][]string{}
	for _, h := range tc.Status.Holds {
		held[h.CertificateAuthority] = h.Fingerprints
	}
	return held
}

// intersect is, for each CA of a, the fingerprints b also has for it.
func intersect(a, b map[string][]string) map[string][]string {
	out := make(map[string][]string, len(a))
	for ca, fps := range a {
		out[ca] = sets.List(sets.New(fps...).Intersection(sets.New(b[ca]...)))
	}
	return out
}

func sameHolds(a, b map[string][]string) bool {
	if len(a) != len(b) {
		return false
	}
	for ca, fps := range a {
		other, ok := b[ca]
		if !ok || !sets.New(fps...).Equal(sets.New(other...)) {
			return false
		}
	}
	return true
}

var errTooLarge = fmt.Errorf("larger than %d bytes", maxFileBytes)

// readCapped reads path whole, refusing more than maxFileBytes before
// holding it all.
func readCapped(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	data, err := io.ReadAll(io.LimitReader(f, maxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if len(data) > maxFileBytes {
		return nil, fmt.Errorf("%s: %w", path, errTooLarge)
	}
	return data, nil
}
