package credential

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	rotationvalidation "rekey.io/rekey/pkg/apis/rotation/validation"
)

// WebhookRequest is what rekey POSTs to a Webhook minter's URL.
type WebhookRequest struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// Operation is "mint" or "revoke".
	Operation string `json:"operation"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid"`
	// Generation names the credential: a mint repeated for a generation
	// (rekey died before recording it) must return a credential that the
	// revoke of that generation also revokes.
	Generation int64 `json:"generation"`
}

// WebhookResponse is what a mint answers: the Secret keys and values.
type WebhookResponse struct {
	Data map[string][]byte `json:"data"`
}

// Webhook protocol constants.
const (
	WebhookKind       = "CredentialRequest"
	maxWebhookBody    = 64 << 10
	defaultWebhookTTL = 10 * time.Second
	// maxWebhookTimeoutSeconds is validation's MaxWebhookTimeout.
	maxWebhookTimeoutSeconds = rotationvalidation.MaxWebhookTimeout
)

// WebhookMinter calls an external system. Redirects are refused, every
// call is bounded in time (its timeoutSeconds, clamped to what validation
// accepts) and the response body is capped before it is parsed.
//
// What a failure reports (the Degraded condition, readable by whoever may
// read the RotatingCredential) is its class only: connection refused, host
// name did not resolve, TLS failed, timed out, HTTP status, invalid
// response. Never the address rekey dialled, what a resolver answered, the
// peer's certificate or the body: a user allowed to write a webhook minter
// must not be able to use rekey to map what it can reach beyond that class.
// The transport's own error goes to rekey's log (V(2)) for the operator.
type WebhookMinter struct {
	// Transport, when set, replaces the default (tests).
	Transport http.RoundTripper
}

// Mint implements Minter.
func (m WebhookMinter) Mint(ctx context.Context, rc *rotationv1alpha1.RotatingCredential, generation int64) (map[string][]byte, error) {
	var out WebhookResponse
	if err := m.call(ctx, rc, "mint", generation, &out); err != nil {
		return nil, err
	}
	if len(out.Data) == 0 {
		return nil, &MintError{Reason: "WebhookInvalidResponse", Err: errors.New("mint: the response has no data")}
	}
	for k := range out.Data {
		if errs := validKey(k); errs != "" {
			// The key is the webhook's word, not rekey's: not quoted.
			return nil, &MintError{Reason: "WebhookInvalidResponse", Err: fmt.Errorf("mint: a key of the response is not a valid Secret key (or ends in %s)", OldSuffix)}
		}
	}
	return out.Data, nil
}

// Revoke implements Minter.
func (m WebhookMinter) Revoke(ctx context.Context, rc *rotationv1alpha1.RotatingCredential, generation int64) error {
	return m.call(ctx, rc, "revoke", generation, nil)
}

func (m WebhookMinter) call(ctx context.Context, rc *rotationv1alpha1.RotatingCredential, op string, generation int64, out any) error {
	spec := rc.Spec.Minter.Webhook
	if spec == nil {
		return &MintError{Reason: "InvalidSpec", Err: errors.New("no webhook block")}
	}
	timeout := webhookTimeout(spec)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	body, _ := json.Marshal(WebhookRequest{APIVersion: rotationv1alpha1.SchemeGroupVersion.String(), Kind: WebhookKind, Operation: op,
		Namespace: rc.Namespace, Name: rc.Name, UID: string(rc.UID), Generation: generation})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, spec.URL, bytes.NewReader(body))
	if err != nil {
		return &MintError{Reason: "InvalidSpec", Err: errors.New(op + ": the webhook URL is not usable")}
	}
	req.Header.Set("Content-Type", "application/json")
	client, err := m.client(spec.CABundle, timeout)
	if err != nil {
		return &MintError{Reason: "InvalidSpec", Err: fmt.Errorf("%s: %w", op, err)}
	}
	logger := klog.FromContext(ctx).WithValues("rotatingCredential", rc.Namespace+"/"+rc.Name, "operation", op)
	rsp, err := client.Do(req)
	if err != nil {
		return transportFailure(klog.NewContext(ctx, logger), op, err)
	}
	defer func() { _ = rsp.Body.Close() }()
	// Read at most one byte past the cap: a larger body is refused before
	// any of it is parsed, and a body that never ends is cut by the
	// timeout.
	data, err := io.ReadAll(io.LimitReader(rsp.Body, maxWebhookBody+1))
	if err != nil {
		return transportFailure(klog.NewContext(ctx, logger), op, err)
	}
	if op == "revoke" && (rsp.StatusCode == http.StatusNotFound || rsp.StatusCode == http.StatusGone) {
		return nil
	}
	if rsp.StatusCode/100 != 2 {
		return &MintError{Reason: "WebhookFailed", Err: fmt.Errorf("%s: the webhook answered HTTP %d", op, rsp.StatusCode)}
	}
	if out == nil {
		return nil
	}
	if len(data) > maxWebhookBody {
		return &MintError{Reason: "WebhookInvalidResponse", Err: fmt.Errorf("%s: the response exceeds %d bytes", op, maxWebhookBody)}
	}
	if err := json.Unmarshal(data, out); err != nil {
		// Not the decoder's message: it may quote the body.
		return &MintError{Reason: "WebhookInvalidResponse", Err: fmt.Errorf("%s: the response is not a JSON object with data", op)}
	}
	return nil
}

// errRedirect is what the client's CheckRedirect returns.
var errRedirect = errors.New("the webhook redirected; rekey does not follow redirects")

// transportFailure reports a failed exchange by its class (see
// WebhookMinter); the transport's error, which names addresses, is logged
// for the operator only.
func transportFailure(ctx context.Context, op string, err error) *MintError {
	klog.FromContext(ctx).V(2).Info("Webhook call failed", "err", err)
	reason, class := "WebhookUnreachable", "the connection failed"
	var dnsErr *net.DNSError
	var unknownAuthority x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var invalid x509.CertificateInvalidError
	var verify *tls.CertificateVerificationError
	var record tls.RecordHeaderError
	var alert tls.AlertError
	var netErr net.Error
	switch {
	case ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &netErr) && netErr.Timeout()):
		reason, class = "WebhookTimeout", "timed out"
	case errors.Is(err, errRedirect):
		reason, class = "WebhookFailed", "the webhook answered with a redirect, which rekey does not follow"
	case errors.As(err, &dnsErr):
		class = "the host name did not resolve"
	case errors.Is(err, syscall.ECONNREFUSED):
		class = "connection refused"
	case errors.Is(err, syscall.ENETUNREACH) || errors.Is(err, syscall.EHOSTUNREACH):
		class = "no route to the host"
	case errors.As(err, &unknownAuthority) || errors.As(err, &hostname) || errors.As(err, &invalid) ||
		errors.As(err, &verify) || errors.As(err, &record) || errors.As(err, &alert):
		reason, class = "WebhookTLSFailed", "the TLS handshake failed (is caBundle the webhook's CA, and the URL's host in its certificate?)"
	case errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		class = "the connection was closed"
	}
	return &MintError{Reason: reason, Err: errors.New(op + ": " + class)}
}

func (m WebhookMinter) client(caBundle []byte, timeout time.Duration) (*http.Client, error) {
	transport := m.Transport
	if transport == nil {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12}
		if len(caBundle) > 0 {
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(caBundle) {
				return nil, errors.New("caBundle holds no certificate")
			}
			cfg.RootCAs = pool
		}
		// A transport per call (its CA bundle is the RotatingCredential's):
		// no idle connection may outlive it.
		transport = &http.Transport{TLSClientConfig: cfg, Proxy: http.ProxyFromEnvironment, DisableKeepAlives: true,
			TLSHandshakeTimeout: timeout, ResponseHeaderTimeout: timeout, MaxResponseHeaderBytes: maxWebhookBody}
	}
	// The context bounds the call; Timeout bounds it again should a
	// caller's context outlive it (the body is read inside the bound).
	return &http.Client{Transport: transport, Timeout: timeout, CheckRedirect: func(*http.Request, []*http.Request) error {
		return errRedirect
	}}, nil
}

// webhookTimeout is a call's bound: timeoutSeconds, clamped to what
// validation accepts (1 to 30 seconds) so that no stored object can hold a
// worker longer.
func webhookTimeout(spec *rotationv1alpha1.WebhookMinter) time.Duration {
	if spec.TimeoutSeconds == nil {
		return defaultWebhookTTL
	}
	seconds := min(max(*spec.TimeoutSeconds, 1), maxWebhookTimeoutSeconds)
	return time.Duration(seconds) * time.Second
}
