package agent

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"

	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
)

// RevokedError is a request refused because the certificate it was made
// with is revoked: kube-apiserver's 403 carrying the reason of rekey's
// authorization webhook, "rekey: certificate X509SHA256=<hex> was revoked
// (<reason>) at <time>".
type RevokedError struct {
	// SHA256 is the revoked certificate's SHA-256, lowercase hex.
	SHA256 string
	// Message is the server's message.
	Message string
}

func (e *RevokedError) Error() string { return "the certificate is revoked: " + e.Message }

// authorizerRefusal is the sentence kube-apiserver writes when an
// authorizer denies a request (k8s.io/apiserver
// endpoints/handlers/responsewriters.ForbiddenStatusError), after the
// "<resource> is forbidden: " of a Forbidden status, with the denying
// authorizer's reason after ": ". That reason must be rekey's webhook's:
// "rekey: certificate X509SHA256=<hex> was revoked (<reason>) at <time>".
// The user name, verb, resource, group, namespace and path are Go-quoted
// (%q); the user is the agent's own.
var authorizerRefusal = regexp.MustCompile(`^User ` + quoted + ` cannot [^ ]+ ` +
	`(?:path ` + quoted + `|resource ` + quoted + ` in API group ` + quoted + ` (?:at the cluster scope|in the namespace ` + quoted + `))` +
	`: rekey: certificate X509SHA256=([0-9a-fA-F]{64}) was revoked(?: |$)`)

// quoted is a string as Go's %q writes it.
const quoted = `"(?:[^"\\]|\\.)*"`

// AsRevoked returns the revocation a 403 reports, nil for any other error.
//
// Only kube-apiserver's refusal by an authorizer, whose reason is rekey's
// webhook's, counts: a 403 Forbidden status whose message is exactly that
// sentence. The hash is no secret and other 403s carry text others wrote:
// an admission webhook's or a ValidatingAdmissionPolicy's denial (its
// messageExpression may quote the request's credential-id) starts
// differently ("admission webhook ... denied the request: ...",
// "ValidatingAdmissionPolicy ... denied request: ...") and must not make
// the agent discard a good pair. Only the hash that the message names
// counts too: callers compare it with their certificate's.
//
// A 401 is not taken for one: the server then did not say why (an
// untrusted CA, an expired certificate), and discarding a pair on a guess
// could leave a node whose bootstrap credentials have expired with none.
func AsRevoked(err error) *RevokedError {
	var revoked *RevokedError
	if errors.As(err, &revoked) {
		return revoked
	}
	var status apierrors.APIStatus
	if err == nil || !errors.As(err, &status) {
		return nil
	}
	st := status.Status()
	if st.Code != http.StatusForbidden || st.Reason != metav1.StatusReasonForbidden {
		return nil
	}
	rest, ok := strings.CutPrefix(st.Message, forbiddenPrefix(st.Details))
	if !ok {
		return nil
	}
	m := authorizerRefusal.FindStringSubmatch(rest)
	if m == nil {
		return nil
	}
	return &RevokedError{SHA256: strings.ToLower(m[1]), Message: st.Message}
}

// forbiddenPrefix is how apierrors.NewForbidden, with which kube-apiserver
// refuses, begins the message: the resource (and name) of the details.
func forbiddenPrefix(details *metav1.StatusDetails) string {
	var gr schema.GroupResource
	name := ""
	if details != nil {
		gr = schema.GroupResource{Group: details.Group, Resource: details.Kind}
		name = details.Name
	}
	switch {
	case gr.Empty():
		return "forbidden: "
	case name == "":
		return gr.String() + " is forbidden: "
	default:
		return fmt.Sprintf("%s %q is forbidden: ", gr.String(), name)
	}
}

// CertificateSHA256 is what kube-apiserver puts in a request's
// credential-id (X509SHA256=<hex>) and what a Revocation is named by.
func CertificateSHA256(cert *x509.Certificate) string {
	sum := sha256.Sum256(cert.Raw)
	return hex.EncodeToString(sum[:])
}

// selfSubjectReview is the body of the probe: any authenticated user may
// create one (system:basic-user), and it changes nothing.
const selfSubjectReview = `{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`

// ProbeRevoked makes one cheap authenticated request with client (a
// SelfSubjectReview create, which every authenticated user may make) and
// returns a *RevokedError when the server refuses it because the
// certificate is revoked. Any other outcome is no news: nil when the
// request went through or was refused for another reason (a server that
// does not serve authentication.k8s.io: 404), the error when the server
// could not be asked.
func ProbeRevoked(ctx context.Context, client clientset.Interface) error {
	rc := client.Discovery().RESTClient()
	if rc == nil {
		return errors.New("the client has no REST client to probe with")
	}
	err := rc.Post().AbsPath("/apis/authentication.k8s.io/v1/selfsubjectreviews").
		SetHeader("Content-Type", "application/json").Body([]byte(selfSubjectReview)).Do(ctx).Error()
	if revoked := AsRevoked(err); revoked != nil {
		return revoked
	}
	var status apierrors.APIStatus
	if err == nil || errors.As(err, &status) {
		// The server answered: whatever it said, it was not that the
		// certificate is revoked.
		return nil
	}
	return err
}

// revocationState is what a Manager knows of its pair's revocation: the
// hash the server said is revoked. Shared by the run loop and the probe
// goroutine.
type revocationState struct {
	mu      sync.Mutex
	revoked string
}

func (s *revocationState) set(sha string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.revoked = sha
}

func (s *revocationState) is(sha string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.revoked != "" && s.revoked == sha
}

// NoteRevoked records that the certificate with this SHA-256 is revoked:
// the next Once discards the current pair if it is that certificate, and
// bootstraps anew.
func (m *Manager) NoteRevoked(sha string) { m.revocation.set(strings.ToLower(sha)) }

// discardIfRevoked drops the current pair when the server said it is
// revoked, reporting whether it did.
func (m *Manager) discardIfRevoked(ctx context.Context, current *tls.Certificate) (bool, error) {
	sha := CertificateSHA256(current.Leaf)
	if !m.revocation.is(sha) {
		return false, nil
	}
	klog.FromContext(ctx).Info("The current certificate is revoked: discarding it and bootstrapping anew with a new key",
		"prefix", m.Store.Prefix, "certificateSHA256", sha, "serialNumber", current.Leaf.SerialNumber.Text(16))
	if err := m.Store.DiscardCurrent(current.Leaf); err != nil {
		return false, &StoreError{fmt.Errorf("discarding the revoked certificate: %w", err)}
	}
	revokedCertificates.WithLabelValues(m.Store.Prefix).Inc()
	return true, nil
}

// DiscardCurrent forgets the current pair when it is leaf's, because leaf
// is revoked: the current link is removed (and the directory synced) before
// anything else, so that from then on, across a crash too, nothing uses
// the pair (Current reports ErrNoCertificate, `run` bootstraps with the
// bootstrap credentials, `exec-credential` fails rather than hand out a
// certificate every request is refused with). Then the pair file, its
// early renewal note and the pending key go too: the next request is for a
// new key. A current link that names another pair (renewed meanwhile) is
// left alone.
func (s *Store) DiscardCurrent(leaf *x509.Certificate) error {
	if err := CheckDir(s.Dir); err != nil {
		return err
	}
	path, err := s.currentPair()
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	data, err := readPrivate(path)
	if err == nil {
		pair, perr := parsePair(data)
		if perr == nil && CertificateSHA256(pair.Leaf) != CertificateSHA256(leaf) {
			return nil
		}
	}
	if err := os.Remove(s.CurrentPath()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := syncDir(s.Dir); err != nil {
		return err
	}
	reached(StepDiscard)
	if path != s.CurrentPath() && filepath.Dir(path) == s.Dir {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	if err := s.SetEarlyRenewal(leaf, time.Time{}); err != nil {
		return err
	}
	if err := s.DropPendingKey(); err != nil {
		return err
	}
	return syncDir(s.Dir)
}

// watchRevocation probes the client certificate every interval (from
// at once) and, when the server says it is revoked, notes it on m and
// wakes the run loop, which discards it and bootstraps. Only the run
// loop writes the store: this goroutine reads it.
func watchRevocation(ctx context.Context, m *Manager, interval time.Duration, wake chan<- struct{}) {
	logger := klog.FromContext(ctx)
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		if revoked, err := m.probe(ctx, interval); err != nil {
			logger.V(2).Info("Could not check whether the certificate is revoked", "prefix", m.Store.Prefix, "err", err.Error())
		} else if revoked {
			select {
			case wake <- struct{}{}:
			default:
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// probe asks the server once, with the current pair, whether it is
// revoked, bounded by timeout; it notes a revocation of that pair.
func (m *Manager) probe(ctx context.Context, timeout time.Duration) (bool, error) {
	current, err := m.Store.Current()
	if err != nil {
		// No pair (bootstrapping): nothing to check.
		return false, nil
	}
	client, err := m.NewClient(current)
	if err != nil {
		return false, err
	}
	probeCtx, cancel := context.WithTimeout(ctx, max(timeout, 10*time.Second))
	defer cancel()
	err = ProbeRevoked(probeCtx, client)
	revoked := AsRevoked(err)
	if revoked == nil {
		return false, err
	}
	if revoked.SHA256 != CertificateSHA256(current.Leaf) {
		return false, fmt.Errorf("the server says another certificate is revoked: %s", revoked.Message)
	}
	klog.FromContext(ctx).Info("The server refuses the current certificate: it is revoked", "prefix", m.Store.Prefix, "message", revoked.Message)
	m.NoteRevoked(revoked.SHA256)
	return true, nil
}
