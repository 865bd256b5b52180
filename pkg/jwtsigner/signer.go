// Package jwtsigner is `rekey-agent jwt-signer`: the endpoint kube-apiserver
// dials at --service-account-signing-endpoint on a control-plane host. It
// serves pkg/externaljwt on a Unix socket:
//
//   - FetchKeys and Metadata from the public keys of a ServiceAccountTokens
//     CertificateAuthority (its current, next and previous keys, and its
//     legacy public keys until their expireTime, those kept out of OIDC
//     discovery) and its maxTokenExpiration. It watches the CA and keeps
//     them in a cache file too, read at start, so that it answers
//     kube-apiserver's first FetchKeys (which kube-apiserver waits 60s for
//     at its start) before any rekey-apiserver pod runs.
//   - Sign by forwarding the claims to the CA's signjwt subresource: the
//     private key never leaves rekey's key store. A token whose kid the
//     keys served do not have is not handed out: the CA is read again
//     first, and the call fails if the kid is still not there. Nor is a
//     signature that does not verify over the claims sent with the key
//     served for its kid.
//
// After each FetchKeys answer it reports, as a TrustConsumer (registered by
// itself), the fingerprints of the CA certificates whose keys kube-apiserver
// fetched: a rotation's new key signs only once every kube-apiserver has it.
// One jwt-signer serves one kube-apiserver: the report says what that one
// fetched.
package jwtsigner

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	"rekey.io/rekey/pkg/externaljwt"
	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
	"rekey.io/rekey/pkg/jwtkey"
	"rekey.io/rekey/pkg/trustsync"
)

// Defaults of the options (and rekey-agent jwt-signer's flags).
const (
	DefaultSocket      = "/run/rekey/jwt-signer.sock"
	DefaultSocketMode  = os.FileMode(0o600)
	DefaultCacheFile   = "/var/lib/rekey/jwt-signer/keys.json"
	DefaultRefreshHint = 30 * time.Second
	// DefaultSignTimeout bounds one signjwt call (and the CA read that may
	// follow it).
	DefaultSignTimeout = 10 * time.Second
	// DefaultFirstKeysWait is how long FetchKeys and Metadata wait for a
	// first key set when there is no cache: kube-apiserver waits 10s for
	// Metadata at its start.
	DefaultFirstKeysWait = 5 * time.Second
	// ConsumerPrefix starts the default TrustConsumer name, followed by
	// the host name.
	ConsumerPrefix = "kube-apiserver-jwt."
)

// Options configure a Signer.
type Options struct {
	// CertificateAuthority is the ServiceAccountTokens CA whose keys are
	// served and which signs.
	CertificateAuthority string
	// Socket is the Unix socket served: a path, or "@name" for an
	// abstract socket (only with AllowAbstractSocket).
	Socket string
	// AllowAbstractSocket allows an abstract Socket: it has no file mode,
	// so any process in the network namespace may connect (AllowedUIDs
	// still applies).
	AllowAbstractSocket bool
	// SocketMode is the socket file's mode.
	SocketMode os.FileMode
	// AllowedUIDs are the uids whose processes are served (the kernel's
	// SO_PEERCRED of each connection); empty: the signer's own and root's.
	AllowedUIDs []uint32
	// CacheFile keeps the public keys served, for the next start.
	CacheFile string
	// TrustConsumer is the TrustConsumer reported as; empty: no report.
	TrustConsumer string
	// RefreshHint is how often kube-apiserver is told to fetch the keys.
	RefreshHint time.Duration
	// SignTimeout bounds one Sign call's work (zero: DefaultSignTimeout).
	SignTimeout time.Duration
	// FirstKeysWait is how long FetchKeys and Metadata wait for a first
	// key set (zero: DefaultFirstKeysWait).
	FirstKeysWait time.Duration
}

// Validate checks the options; the errors name the flags.
func (o *Options) Validate() error {
	var errs []error
	if o.CertificateAuthority == "" {
		errs = append(errs, errors.New("--certificate-authority is required"))
	} else if msgs := validation.IsDNS1123Subdomain(o.CertificateAuthority); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("--certificate-authority %q is not a valid CertificateAuthority name: %s", o.CertificateAuthority, strings.Join(msgs, "; ")))
	}
	switch {
	case o.Socket == "" || o.Socket == "@":
		errs = append(errs, errors.New("--socket is required (a path, or @name for an abstract socket with --allow-abstract-socket)"))
	case strings.HasPrefix(o.Socket, "@") && !o.AllowAbstractSocket:
		errs = append(errs, fmt.Errorf("--socket %q is an abstract socket, which has no file mode: any process in the host's network namespace (a hostNetwork pod's too) may connect and, if its uid is in --allowed-uids, have any service-account token signed; use a path, or pass --allow-abstract-socket", o.Socket))
	}
	if o.SocketMode&^os.ModePerm != 0 {
		errs = append(errs, fmt.Errorf("--socket-mode %#o has bits beyond the permissions (0777)", uint32(o.SocketMode)))
	}
	if o.CacheFile == "" {
		errs = append(errs, errors.New("--cache-file is required"))
	}
	if o.TrustConsumer != "" {
		if msgs := validation.IsDNS1123Subdomain(o.TrustConsumer); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("--trust-consumer %q is not a valid TrustConsumer name (a DNS subdomain: lowercase letters, digits, '-' and '.'): %s", o.TrustConsumer, strings.Join(msgs, "; ")))
		}
	}
	if o.RefreshHint < time.Second || o.RefreshHint%time.Second != 0 {
		errs = append(errs, fmt.Errorf("--refresh-hint %s must be whole seconds, at least 1s", o.RefreshHint))
	}
	if o.SignTimeout < 0 || o.FirstKeysWait < 0 {
		errs = append(errs, errors.New("the sign timeout and the first keys' wait must not be negative"))
	}
	return errors.Join(errs...)
}

// Signer is the host signer: an externaljwt.KeySource and externaljwt.Signer.
type Signer struct {
	opts   Options
	client clientset.Interface
	clock  clock.Clock
	// reportBackoff is the wait after a failed report (tests shorten it).
	reportBackoff func() wait.Backoff

	mu  sync.Mutex
	set *Set
	// gen counts the sets installed; written is the last one in the
	// cache file (under writeMu).
	gen uint64
	// rv is the newest resourceVersion of the CA applied: a read that
	// raced the watch and is older is not applied over it.
	rv uint64
	// fingerprints maps every CA key's kid seen to its certificate's
	// fingerprint (a handful per rotation).
	fingerprints map[string]string
	// fetched are the fingerprints of the last FetchKeys answer.
	fetched    []string
	hasFetched bool
	// problem is the last reason the CA gave no keys (logged on change).
	problem string
	// caRead is set once a CA read gave keys: until then, the keys
	// served (if any) are the cache file's.
	caRead bool

	known     chan struct{}
	knownOnce sync.Once
	// changed wakes the maintenance loop (a new set, a failed write).
	changed chan struct{}
	// fetchedCh wakes the report loop.
	fetchedCh chan struct{}

	writeMu     sync.Mutex
	written     uint64
	writeFailed bool
	rereadMu    sync.Mutex
}

var (
	_ externaljwt.KeySource = &Signer{}
	_ externaljwt.Signer    = &Signer{}
)

// New returns a Signer of the options that asks with client. A zero
// SocketMode, RefreshHint, SignTimeout or FirstKeysWait is its default.
func New(client clientset.Interface, opts Options) (*Signer, error) {
	if opts.SocketMode == 0 {
		opts.SocketMode = DefaultSocketMode
	}
	if opts.RefreshHint == 0 {
		opts.RefreshHint = DefaultRefreshHint
	}
	if opts.SignTimeout == 0 {
		opts.SignTimeout = DefaultSignTimeout
	}
	if opts.FirstKeysWait == 0 {
		opts.FirstKeysWait = DefaultFirstKeysWait
	}
	if len(opts.AllowedUIDs) == 0 {
		opts.AllowedUIDs = DefaultAllowedUIDs()
	} else {
		opts.AllowedUIDs = slices.Clone(opts.AllowedUIDs)
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	return &Signer{
		opts:          opts,
		client:        client,
		clock:         clock.RealClock{},
		reportBackoff: reportBackoff,
		fingerprints:  map[string]string{},
		known:         make(chan struct{}),
		changed:       make(chan struct{}, 1),
		fetchedCh:     make(chan struct{}, 1),
	}, nil
}

// DefaultAllowedUIDs are the uids served when none are given: the
// signer's own (kube-apiserver running as the same user) and root's.
func DefaultAllowedUIDs() []uint32 {
	uid := os.Getuid()
	if uid <= 0 {
		return []uint32{0}
	}
	return []uint32{uint32(uid), 0}
}

// reportBackoff is the wait after a failed report: 1s doubling to 5m,
// jittered.
func reportBackoff() wait.Backoff {
	return wait.Backoff{Duration: time.Second, Factor: 2, Jitter: 0.5, Cap: 5 * time.Minute, Steps: math.MaxInt32}
}

func notify(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// Run serves the socket until ctx is done, then stops (the socket file is
// removed). It fails only when the socket cannot be listened on.
func (s *Signer) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithValues("certificateAuthority", s.opts.CertificateAuthority)
	ctx = klog.NewContext(ctx, logger)
	s.loadCache(ctx)
	lis, err := s.listen(ctx)
	if err != nil {
		return err
	}
	srv, err := externaljwt.NewServer(s, s, externaljwt.Options{FetchedKeys: s.fetchedKeys, AllowedUIDs: s.opts.AllowedUIDs})
	if err != nil {
		_ = lis.Close()
		return err
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wg.Go(func() {
		trustsync.WatchCA(ctx, s.client, s.opts.CertificateAuthority, func(ca *rotationv1alpha1.CertificateAuthority) {
			_ = s.applyCA(ctx, ca)
		})
	})
	wg.Go(func() { s.maintain(ctx) })
	if s.opts.TrustConsumer != "" {
		wg.Go(func() { s.reportLoop(ctx) })
	} else {
		logger.Info("Warning: no TrustConsumer (--trust-consumer is empty): the keys kube-apiserver fetched are not reported, so no rotation of the CertificateAuthority waits for this kube-apiserver to have fetched its new key before that key signs")
	}
	return externaljwt.Serve(ctx, lis, srv)
}

// listen listens on the socket, making its directory (0700: only the
// signer's user, which kube-apiserver should be) when missing. Access
// wider than the signer's user is served with a warning: whoever connects
// (and passes the uid check) can have any service-account token signed.
func (s *Signer) listen(ctx context.Context) (net.Listener, error) {
	logger := klog.FromContext(ctx)
	const risk = "any process that can connect, and whose uid is in --allowed-uids, can have any service-account token signed"
	if strings.HasPrefix(s.opts.Socket, "@") {
		logger.Info("Warning: serving on an abstract socket (--allow-abstract-socket), which has no file mode: "+risk, "socket", s.opts.Socket, "allowedUIDs", s.opts.AllowedUIDs)
	} else {
		dir := filepath.Dir(s.opts.Socket)
		fi, err := os.Stat(dir)
		switch {
		case errors.Is(err, os.ErrNotExist):
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return nil, fmt.Errorf("--socket: making its directory: %w", err)
			}
			logger.Info("Made the socket's directory, mode 0700", "dir", dir)
		case err == nil && fi.Mode().Perm()&0o022 != 0 && fi.Mode()&os.ModeSticky == 0:
			// Whoever may write there may replace the socket with
			// their own between its creation and kube-apiserver's dial.
			logger.Info("Warning: the socket's directory may be written by group or others, who could put their own socket in its place", "dir", dir, "mode", fmt.Sprintf("%#o", fi.Mode().Perm()))
		}
		if s.opts.SocketMode&0o077 != 0 {
			logger.Info("Warning: --socket-mode lets group or others connect: "+risk, "socket", s.opts.Socket, "socketMode", fmt.Sprintf("%#o", uint32(s.opts.SocketMode)), "allowedUIDs", s.opts.AllowedUIDs)
		}
	}
	lis, err := externaljwt.Listen(s.opts.Socket, s.opts.SocketMode)
	if err != nil {
		return nil, fmt.Errorf("--socket: %w", err)
	}
	return lis, nil
}

// loadCache serves the cache file's keys until the CA is read. A cache
// that cannot be read or vouched for is logged and ignored.
func (s *Signer) loadCache(ctx context.Context) {
	logger := klog.FromContext(ctx)
	set, err := ReadCache(s.opts.CacheFile, s.opts.CertificateAuthority)
	switch {
	case err != nil:
		errorsTotal.WithLabelValues(opCacheRead).Inc()
		logger.Error(err, "Ignoring the cache file: no keys are served until the CertificateAuthority is read", "cacheFile", s.opts.CacheFile)
		return
	case set == nil:
		logger.Info("No cache file yet: no keys are served until the CertificateAuthority is read", "cacheFile", s.opts.CacheFile)
		return
	}
	s.mu.Lock()
	if s.set != nil {
		// The CA was read first.
		s.mu.Unlock()
		return
	}
	s.installLocked(set)
	// What the file holds needs no writing.
	gen := s.gen
	s.mu.Unlock()
	s.writeMu.Lock()
	s.written = max(s.written, gen)
	s.writeMu.Unlock()
	// Loud, and with what the CA was when the file was written: a key a
	// Complete dropped since (a forced one, for a compromised key) is
	// served again until the CA is read.
	logger.Info("Warning: serving keys from the cache file, not from the CertificateAuthority (not read yet): they are what it named when the file was written, so a key it dropped since (a forced Complete) is served until it is read",
		"cacheFile", s.opts.CacheFile, "keys", describe(set), "rotationPhase", set.RotationPhase, "resourceVersion", set.ResourceVersion, "dataTimestamp", set.DataTimestamp)
}

// installLocked makes set (stamped) the set served. s.mu is held.
func (s *Signer) installLocked(set *Set) {
	s.set = set
	s.gen++
	for _, k := range set.Keys {
		if k.Fingerprint != "" {
			s.fingerprints[k.KeyID] = k.Fingerprint
		}
	}
	n := set.count()
	for _, st := range states {
		keysServed.WithLabelValues(string(st)).Set(float64(n[st]))
	}
	s.knownOnce.Do(func() { close(s.known) })
	notify(s.changed)
}

// describe names a set's keys for a log: kid and state.
func describe(set *Set) []string {
	var out []string
	for _, k := range set.Keys {
		out = append(out, k.KeyID+" ("+string(k.State)+")")
	}
	return out
}

// applyCA serves the keys ca says to serve, when they differ from those
// served. A CA that is gone, or says nothing servable, leaves the keys as
// they are (logged): dropping them would fail every token in use.
func (s *Signer) applyCA(ctx context.Context, ca *rotationv1alpha1.CertificateAuthority) error {
	logger := klog.FromContext(ctx)
	if ca == nil {
		s.noteProblem(ctx, "the CertificateAuthority does not exist")
		return errors.New("the CertificateAuthority does not exist")
	}
	now := s.clock.Now()
	set, err := FromCA(ca, now)
	if err != nil {
		errorsTotal.WithLabelValues(opCA).Inc()
		s.noteProblem(ctx, err.Error())
		return err
	}
	s.mu.Lock()
	if rv, perr := strconv.ParseUint(ca.ResourceVersion, 10, 64); perr == nil {
		if rv < s.rv {
			s.mu.Unlock()
			return nil
		}
		s.rv = rv
	}
	s.problem = ""
	firstRead := !s.caRead
	s.caRead = true
	if sameKeys(s.set, set) {
		if firstRead {
			logger.Info("Read the CertificateAuthority: it names the keys served from the cache file", "keys", describe(set), "rotationPhase", set.RotationPhase, "resourceVersion", set.ResourceVersion)
		}
		if s.set.RotationPhase == set.RotationPhase {
			s.mu.Unlock()
			return nil
		}
		// Only the phase changed: the cache file records it, and
		// kube-apiserver's dataTimestamp (the keys) stays.
		set.DataTimestamp = s.set.DataTimestamp
		s.installLocked(set)
		gen := s.gen
		s.mu.Unlock()
		s.writeCache(ctx, set, gen)
		return nil
	}
	set.DataTimestamp = now.UTC()
	s.installLocked(set)
	gen := s.gen
	s.mu.Unlock()
	logger.Info("Serving the CertificateAuthority's keys", "keys", describe(set), "maxTokenExpirationSeconds", set.MaxTokenExpirationSeconds, "rotationPhase", set.RotationPhase, "resourceVersion", set.ResourceVersion)
	s.writeCache(ctx, set, gen)
	return nil
}

// noteProblem logs why the CA gave no keys, when the reason changed.
func (s *Signer) noteProblem(ctx context.Context, problem string) {
	s.mu.Lock()
	changed := problem != s.problem
	s.problem = problem
	serving := s.set != nil
	s.mu.Unlock()
	if changed {
		klog.FromContext(ctx).Error(errors.New(problem), "The CertificateAuthority has no keys to serve; the keys served stay as they are", "serving", serving)
	}
}

// writeCache writes set, generation gen, unless a newer one was written.
func (s *Signer) writeCache(ctx context.Context, set *Set, gen uint64) {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	if gen <= s.written {
		return
	}
	if err := WriteCache(s.opts.CacheFile, set); err != nil {
		errorsTotal.WithLabelValues(opCacheWrite).Inc()
		klog.FromContext(ctx).Error(err, "Writing the cache file failed; retrying. The keys are served from memory, but a restart before a write serves older ones", "cacheFile", s.opts.CacheFile)
		if !s.writeFailed {
			s.writeFailed = true
			notify(s.changed)
		}
		return
	}
	s.written = gen
	s.writeFailed = false
}

// maintain drops legacy keys at their expireTime and retries a failed
// cache write, until ctx is done.
func (s *Signer) maintain(ctx context.Context) {
	const writeRetry = 10 * time.Second
	for {
		s.mu.Lock()
		var next time.Time
		if s.set != nil {
			next = s.set.nextExpiry()
		}
		s.mu.Unlock()
		if !next.IsZero() && !next.After(s.clock.Now()) {
			s.prune(ctx)
			continue
		}
		s.writeMu.Lock()
		failed := s.writeFailed
		s.writeMu.Unlock()
		var expire, retry <-chan time.Time
		var timers []clock.Timer
		if !next.IsZero() {
			t := s.clock.NewTimer(next.Sub(s.clock.Now()))
			timers = append(timers, t)
			expire = t.C()
		}
		if failed {
			t := s.clock.NewTimer(writeRetry)
			timers = append(timers, t)
			retry = t.C()
		}
		select {
		case <-ctx.Done():
		case <-s.changed:
		case <-expire:
			s.prune(ctx)
		case <-retry:
			s.mu.Lock()
			set, gen := s.set, s.gen
			s.mu.Unlock()
			s.writeCache(ctx, set, gen)
		}
		for _, t := range timers {
			t.Stop()
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// prune drops the legacy keys expired now.
func (s *Signer) prune(ctx context.Context) {
	now := s.clock.Now()
	s.mu.Lock()
	if s.set == nil {
		s.mu.Unlock()
		return
	}
	set, dropped := s.set.without(now)
	if !dropped {
		s.mu.Unlock()
		return
	}
	set.DataTimestamp = now.UTC()
	s.installLocked(set)
	gen := s.gen
	s.mu.Unlock()
	klog.FromContext(ctx).Info("A legacy key reached its expireTime and is no longer served", "keys", describe(set))
	s.writeCache(ctx, set, gen)
}

// Keys answers the keys served; with none yet, it waits FirstKeysWait
// for a first set, then fails Unavailable.
func (s *Signer) Keys(ctx context.Context) (externaljwt.KeySet, error) {
	select {
	case <-s.known:
	default:
		t := time.NewTimer(s.opts.FirstKeysWait)
		defer t.Stop()
		select {
		case <-s.known:
		case <-ctx.Done():
			return externaljwt.KeySet{}, status.FromContextError(ctx.Err()).Err()
		case <-t.C:
			return externaljwt.KeySet{}, status.Errorf(codes.Unavailable, "no service-account keys yet: no usable cache file (%s) and CertificateAuthority %s not read (is rekey-apiserver reachable?)", s.opts.CacheFile, s.opts.CertificateAuthority)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.set.keySet(s.clock.Now(), s.opts.RefreshHint), nil
}

// fetchedKeys notes a FetchKeys answer: the metrics, and the
// fingerprints of the CA keys in it, for the report.
func (s *Signer) fetchedKeys(_ context.Context, ks externaljwt.KeySet) {
	fetchesTotal.Inc()
	lastFetch.Set(float64(s.clock.Now().Unix()))
	s.mu.Lock()
	defer s.mu.Unlock()
	var fps []string
	for _, k := range ks.Keys {
		if fp := s.fingerprints[k.KeyID]; fp != "" && !k.ExcludeFromOIDCDiscovery {
			fps = append(fps, fp)
		}
	}
	slices.Sort(fps)
	fps = slices.Compact(fps)
	if s.hasFetched && slices.Equal(fps, s.fetched) {
		return
	}
	s.fetched, s.hasFetched = fps, true
	notify(s.fetchedCh)
}

// SignJWT has rekey-apiserver sign claims with the CA's current key
// (signjwt). The answer's kid must be served for discovery: when it is
// not, the CA is read again first, and the call fails Unavailable if it
// is still not. Claims are never logged.
func (s *Signer) SignJWT(ctx context.Context, claims string) (hdr, sig, kid string, err error) {
	logger := klog.FromContext(ctx)
	start := time.Now()
	result := resultError
	defer func() {
		signDuration.Observe(time.Since(start).Seconds())
		signaturesTotal.WithLabelValues(kid, result).Inc()
		if result != resultSigned {
			errorsTotal.WithLabelValues(opSign).Inc()
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, s.opts.SignTimeout)
	defer cancel()
	resp, err := s.client.RotationV1alpha1().CertificateAuthorities().SignJWT(ctx, s.opts.CertificateAuthority, &rotationv1alpha1.JWTSignRequest{Claims: claims}, metav1.CreateOptions{})
	if err != nil {
		var code codes.Code
		var reason string
		code, result, reason = classify(err)
		if code == codes.InvalidArgument {
			// kube-apiserver's claims broke a rule: the answer names it.
			logger.V(2).Info("rekey-apiserver refused the claims", "err", err.Error())
		} else {
			logger.Error(err, "rekey-apiserver did not sign", "code", code)
		}
		// The answer reaches TokenRequest callers (kube-apiserver puts it
		// in their 500): a fixed reason, the details only in this log.
		return "", "", "", status.Error(code, reason)
	}
	kid = resp.KeyID
	if !s.signs(kid) {
		logger.Info("rekey-apiserver signed with a key not served yet; reading the CertificateAuthority", "kid", kid)
		if err := s.reread(ctx, kid); err != nil {
			errorsTotal.WithLabelValues(opReread).Inc()
			logger.Error(err, "Reading the CertificateAuthority after an unknown kid failed", "kid", kid)
		}
		if !s.signs(kid) {
			result = resultUnavailable
			logger.Error(nil, "rekey-apiserver signed with a key the CertificateAuthority's status does not name; refused", "kid", kid)
			return "", "", kid, status.Error(codes.Unavailable, "the key that signed is not among the keys served yet; try again")
		}
	}
	// What rekey-apiserver signed may not be what was sent (a mutating
	// admission webhook there can rewrite the claims): kube-apiserver
	// would hand out a token that does not verify, or whose claims it did
	// not write.
	if err := s.verify(kid, resp.Header, claims, resp.Signature); err != nil {
		logger.Error(err, "rekey-apiserver's signature does not verify over the claims sent with the key served for its kid; refused", "kid", kid)
		return "", "", kid, status.Error(codes.Internal, "the signature does not verify")
	}
	result = resultSigned
	return resp.Header, resp.Signature, kid, nil
}

// verify checks sig64 over hdr64.claims with the public key served for kid.
func (s *Signer) verify(kid, hdr64, claims, sig64 string) error {
	s.mu.Lock()
	var pub crypto.PublicKey
	if s.set != nil {
		pub = s.set.publicKey(kid)
	}
	s.mu.Unlock()
	if pub == nil {
		return fmt.Errorf("no key served for kid %q", kid)
	}
	return verifyJWS(pub, hdr64, claims, sig64)
}

// verifyJWS checks a JWS signature (unpadded base64url) over
// hdr64.claims64 with pub: ES256 (P-256, R||S) or RS256 (PKCS#1 v1.5),
// the algorithms jwtkey signs with.
func verifyJWS(pub crypto.PublicKey, hdr64, claims64, sig64 string) error {
	sig, err := base64.RawURLEncoding.Strict().DecodeString(sig64)
	if err != nil {
		return fmt.Errorf("the signature is not unpadded base64url: %w", err)
	}
	alg, err := jwtkey.AlgorithmFor(pub)
	if err != nil {
		return err
	}
	digest := sha256.Sum256([]byte(hdr64 + "." + claims64))
	switch alg {
	case jwtkey.ES256:
		key, ok := pub.(*ecdsa.PublicKey)
		if !ok || len(sig) != 64 {
			return fmt.Errorf("an ES256 signature is 64 bytes, not %d", len(sig))
		}
		r, ss := new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:])
		if !ecdsa.Verify(key, digest[:], r, ss) {
			return errors.New("the ES256 signature does not verify")
		}
		return nil
	case jwtkey.RS256:
		key, ok := pub.(*rsa.PublicKey)
		if !ok {
			return fmt.Errorf("an RS256 key is RSA, not %T", pub)
		}
		if err := rsa.VerifyPKCS1v15(key, crypto.SHA256, digest[:], sig); err != nil {
			return fmt.Errorf("the RS256 signature does not verify: %w", err)
		}
		return nil
	}
	return fmt.Errorf("algorithm %s is not verified here", alg)
}

// signs says whether the keys served have kid for discovery.
func (s *Signer) signs(kid string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.set != nil && s.set.signs(kid)
}

// reread reads the CA (one read at a time: concurrent Sign calls that
// met the same new kid share it).
func (s *Signer) reread(ctx context.Context, kid string) error {
	s.rereadMu.Lock()
	defer s.rereadMu.Unlock()
	if s.signs(kid) {
		return nil
	}
	ca, err := s.client.RotationV1alpha1().CertificateAuthorities().Get(ctx, s.opts.CertificateAuthority, metav1.GetOptions{})
	if err != nil {
		return err
	}
	return s.applyCA(ctx, ca)
}

// Reasons Sign answers with. kube-apiserver hands them to TokenRequest
// callers, so they tell the class of failure and nothing of the signer's
// user, the CA, its conditions or rekey-apiserver's address.
const (
	reasonForbidden   = "the signer is not authorized to sign; see rekey-agent jwt-signer's log"
	reasonWrongCA     = "rekey-apiserver refused to sign with this CertificateAuthority; see rekey-agent jwt-signer's log"
	reasonNotReady    = "the signing key is not ready; see rekey-agent jwt-signer's log"
	reasonBusy        = "rekey-apiserver is busy; try again"
	reasonSlow        = "rekey-apiserver did not answer in time; try again"
	reasonCanceled    = "the request was canceled"
	reasonFailed      = "rekey-apiserver failed to sign; see rekey-agent jwt-signer's log"
	reasonUnreachable = "rekey-apiserver is unreachable; see rekey-agent jwt-signer's log"
	// reasonClaims starts the answer to claims signjwt refused, followed
	// by the rule they broke.
	reasonClaims = "rekey-apiserver refused the claims"
	// maxRuleLength caps the rule repeated from a refusal.
	maxRuleLength = 512
)

// classify maps a signjwt error to a gRPC code, a result and the reason
// answered.
func classify(err error) (codes.Code, string, string) {
	switch {
	case apierrors.IsInvalid(err):
		// The claims broke a rule (lifetime, issuer, clock).
		return codes.InvalidArgument, resultRefused, claimsReason(err)
	case apierrors.IsBadRequest(err):
		// The CA signs certificates, or the request was refused whole.
		return codes.FailedPrecondition, resultRefused, reasonWrongCA
	case apierrors.IsForbidden(err), apierrors.IsUnauthorized(err):
		return codes.PermissionDenied, resultRefused, reasonForbidden
	case apierrors.IsNotFound(err), apierrors.IsServiceUnavailable(err):
		// The CA (or rekey's API behind the aggregator, at a control
		// plane's start) is not there, or its key is not Ready.
		return codes.Unavailable, resultUnavailable, reasonNotReady
	case apierrors.IsTooManyRequests(err):
		return codes.Unavailable, resultUnavailable, reasonBusy
	case apierrors.IsTimeout(err), apierrors.IsServerTimeout(err):
		return codes.Unavailable, resultUnavailable, reasonSlow
	case errors.Is(err, context.Canceled):
		return codes.Canceled, resultError, reasonCanceled
	case errors.Is(err, context.DeadlineExceeded):
		return codes.Unavailable, resultUnavailable, reasonSlow
	}
	var st apierrors.APIStatus
	if errors.As(err, &st) {
		return codes.Internal, resultError, reasonFailed
	}
	// No answer at all: the server cannot be reached.
	return codes.Unavailable, resultUnavailable, reasonUnreachable
}

// claimsReason is the answer to claims signjwt refused (422): the rules
// broken, from the causes on the field claims (which name only the rule),
// never the rest of the message (which names the CA).
func claimsReason(err error) string {
	var rules []string
	var st apierrors.APIStatus
	if errors.As(err, &st) && st.Status().Details != nil {
		for _, c := range st.Status().Details.Causes {
			if c.Field == "claims" {
				rules = append(rules, strings.TrimPrefix(c.Message, "Invalid value: "))
			}
		}
	}
	if len(rules) == 0 {
		return reasonClaims + "; see rekey-agent jwt-signer's log"
	}
	rule := strings.Join(rules, "; ")
	if len(rule) > maxRuleLength {
		rule = strings.ToValidUTF8(rule[:maxRuleLength], "") + "..."
	}
	return reasonClaims + ": " + rule
}

// reportLoop registers the TrustConsumer, then reports after each
// FetchKeys answer whose CA keys differ from the last, retrying with
// backoff, until ctx is done.
func (s *Signer) reportLoop(ctx context.Context) {
	logger := klog.FromContext(ctx).WithValues("consumer", s.opts.TrustConsumer)
	rep := &trustsync.Reporter{
		Client:       s.client,
		Consumer:     s.opts.TrustConsumer,
		CAs:          []string{s.opts.CertificateAuthority},
		FieldManager: "rekey-agent-jwt-signer",
		Needs:        "jwt-signer's user needs the rekey:jwt-signer ClusterRole, the verb trust on --certificate-authority, and to be the user that registered the consumer",
	}
	backoff := s.reportBackoff()
	registered := false
	var retry <-chan time.Time
	wake := make(chan struct{}, 1)
	wake <- struct{}{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-wake:
		case <-s.fetchedCh:
		case <-retry:
		}
		retry = nil
		if err := s.reportOnce(ctx, rep, &registered); err != nil {
			if ctx.Err() != nil {
				return
			}
			errorsTotal.WithLabelValues(opReport).Inc()
			delay := backoff.Step()
			logger.Error(err, "Reporting the keys kube-apiserver fetched failed; retrying", "in", delay)
			retry = time.After(delay)
			continue
		}
		backoff = s.reportBackoff()
	}
}

// reportOnce registers the consumer if it was not yet, then reports the
// last fetched keys' fingerprints, if any FetchKeys was answered.
func (s *Signer) reportOnce(ctx context.Context, rep *trustsync.Reporter, registered *bool) error {
	if !*registered {
		if _, err := rep.Ensure(ctx); err != nil {
			return err
		}
		*registered = true
	}
	s.mu.Lock()
	fps, has := slices.Clone(s.fetched), s.hasFetched
	s.mu.Unlock()
	if !has {
		return nil
	}
	return rep.Report(ctx, []rotationv1alpha1.TrustHeld{{CertificateAuthority: s.opts.CertificateAuthority, Fingerprints: fps}}, false)
}
