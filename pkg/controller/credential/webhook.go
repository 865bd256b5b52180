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
	"net/http"
	"time"

	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
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
)

// WebhookMinter calls an external system. Redirects are refused, the
// response body is capped, and errors carry the status code only, never
// the body (it may hold a credential).
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
		return nil, &MintError{Reason: "WebhookInvalidResponse", Err: errors.New("the mint response has no data")}
	}
	for k := range out.Data {
		if errs := validKey(k); errs != "" {
			return nil, &MintError{Reason: "WebhookInvalidResponse", Err: fmt.Errorf("the mint response's key %q: %s", k, errs)}
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
	timeout := defaultWebhookTTL
	if spec.TimeoutSeconds != nil {
		timeout = time.Duration(*spec.TimeoutSeconds) * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	body, _ := json.Marshal(WebhookRequest{APIVersion: rotationv1alpha1.SchemeGroupVersion.String(), Kind: WebhookKind, Operation: op,
		Namespace: rc.Namespace, Name: rc.Name, UID: string(rc.UID), Generation: generation})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, spec.URL, bytes.NewReader(body))
	if err != nil {
		return &MintError{Reason: "InvalidSpec", Err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	client, err := m.client(spec.CABundle)
	if err != nil {
		return &MintError{Reason: "InvalidSpec", Err: err}
	}
	rsp, err := client.Do(req)
	if err != nil {
		reason := "WebhookUnreachable"
		if ctx.Err() != nil {
			reason = "WebhookTimeout"
		}
		return &MintError{Reason: reason, Err: fmt.Errorf("%s %s: %w", op, spec.URL, err)}
	}
	defer func() { _ = rsp.Body.Close() }()
	data, err := io.ReadAll(io.LimitReader(rsp.Body, maxWebhookBody+1))
	if err != nil {
		return &MintError{Reason: "WebhookUnreachable", Err: fmt.Errorf("%s %s: reading the response: %w", op, spec.URL, err)}
	}
	if op == "revoke" && (rsp.StatusCode == http.StatusNotFound || rsp.StatusCode == http.StatusGone) {
		return nil
	}
	if rsp.StatusCode/100 != 2 {
		return &MintError{Reason: "WebhookFailed", Err: fmt.Errorf("%s %s answered HTTP %d", op, spec.URL, rsp.StatusCode)}
	}
	if out == nil {
		return nil
	}
	if len(data) > maxWebhookBody {
		return &MintError{Reason: "WebhookInvalidResponse", Err: fmt.Errorf("%s %s: the response exceeds %d bytes", op, spec.URL, maxWebhookBody)}
	}
	if err := json.Unmarshal(data, out); err != nil {
		// Not the decoder's message: it may quote the body.
		return &MintError{Reason: "WebhookInvalidResponse", Err: fmt.Errorf("%s %s: the response is not a JSON object with data", op, spec.URL)}
	}
	return nil
}

func (m WebhookMinter) client(caBundle []byte) (*http.Client, error) {
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
		transport = &http.Transport{TLSClientConfig: cfg, Proxy: http.ProxyFromEnvironment, DisableKeepAlives: true}
	}
	return &http.Client{Transport: transport, CheckRedirect: func(*http.Request, []*http.Request) error {
		return errors.New("the webhook redirected; rekey does not follow redirects")
	}}, nil
}
