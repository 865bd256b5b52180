package agent

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/klog/v2"

	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
)

// Config is what Run keeps current.
type Config struct {
	// Managers keep one certificate each. The first keeps the node's client
	// certificate: the others are asked for with it, and its signer's
	// CertificateAuthority is the one watched.
	Managers []*Manager
	// Kubeconfig, when set, is where the node's kubeconfig is written once
	// the client certificate is in place, with Bootstrap's server and CA.
	Kubeconfig string
	Bootstrap  *clientcmdapi.Config
	// IssuerCheckInterval is how often the issuing CAs are looked at, and,
	// when it is not 0, the client certificate's CA is also watched, so
	// that its rotation is acted on at once. 0: the deadline alone decides.
	IssuerCheckInterval time.Duration
	// Once bootstraps or renews what is due, then returns.
	Once bool
	// RevocationCheckInterval is how often the client certificate is
	// checked (ProbeRevoked: one SelfSubjectReview) for a revocation; a
	// revoked one is discarded and a new one bootstrapped at once. 0: a
	// revocation is noticed only when a renewal is refused for it.
	RevocationCheckInterval time.Duration
}

// Run bootstraps or renews every certificate, then (unless cfg.Once) keeps
// them renewed until ctx is done, backing off exponentially (1s to 5m,
// jittered) after failures.
func Run(ctx context.Context, cfg Config) error {
	if len(cfg.Managers) == 0 {
		return errors.New("no certificate to keep: Config.Managers is empty")
	}
	client := cfg.Managers[0]
	// A watch on the client certificate's CA wakes the loop as soon as it
	// rotates; the periodic look stays as the safety net.
	wake := make(chan struct{}, 1)
	if !cfg.Once && cfg.IssuerCheckInterval > 0 {
		go WatchIssuer(ctx, func() (clientset.Interface, error) {
			current, err := client.Store.Current()
			if err != nil {
				return nil, err
			}
			return client.NewClient(current)
		}, client.Template.SignerName, wake)
	}
	if cfg.RevocationCheckInterval > 0 {
		if cfg.Once {
			// One look before deciding that nothing is due.
			if _, err := client.probe(ctx, cfg.RevocationCheckInterval); err != nil {
				klog.FromContext(ctx).V(2).Info("Could not check whether the certificate is revoked", "prefix", client.Store.Prefix, "err", err.Error())
			}
		} else {
			go watchRevocation(ctx, client, cfg.RevocationCheckInterval, wake)
		}
	}
	logger := klog.FromContext(ctx)
	backoff := retryBackoff()
	for {
		next, err := renew(ctx, cfg)
		if cfg.Once {
			return err
		}
		if err == nil {
			// The certificates are good, but the server could not be
			// asked about their CA: look again with backoff.
			for _, m := range cfg.Managers {
				if checkErr := m.IssuerCheckErr(); checkErr != nil {
					err = checkErr
				}
			}
		}
		delay := time.Until(next)
		if err != nil {
			delay = backoff.Step()
			logger.Error(err, "Certificate not renewed; retrying", "in", delay)
		} else {
			backoff = retryBackoff()
			logger.V(2).Info("Next look", "at", next.UTC())
		}
		timer := time.NewTimer(max(delay, 0))
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-wake:
			timer.Stop()
		case <-timer.C:
		}
	}
}

// retryBackoff is the wait after failed attempts: 1s, 2s, 4s, ... up to
// 5m, each jittered to between half and one and a half times itself (so
// that nodes that failed together do not retry together). wait.Backoff
// jitters upwards only, from d to d·(1+Jitter): its steps are half those,
// with Jitter 2.
func retryBackoff() wait.Backoff {
	return wait.Backoff{Duration: 500 * time.Millisecond, Factor: 2, Jitter: 2, Cap: 150 * time.Second, Steps: math.MaxInt32}
}

// renew runs every manager once (the client certificate first: the serving
// one is asked for with it) and returns the earliest time one must be
// looked at again: a renewal deadline, or a point inside a rotation's
// renewal window.
func renew(ctx context.Context, cfg Config) (time.Time, error) {
	var next time.Time
	var errs []error
	for i, m := range cfg.Managers {
		pair, err := m.Once(ctx)
		if revoked := AsRevoked(err); revoked != nil {
			// The serving certificate is asked for with the client
			// certificate: a refusal naming it is the client's news.
			for _, other := range cfg.Managers {
				other.NoteRevoked(revoked.SHA256)
			}
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", m.Store.Prefix, err))
			if i == 0 {
				// Without a client certificate, nothing else can be asked.
				break
			}
			continue
		}
		if i == 0 && cfg.Kubeconfig != "" {
			if err := WriteNodeKubeconfig(cfg.Kubeconfig, cfg.Bootstrap, m.Store); err != nil {
				errs = append(errs, err)
			}
		}
		if d := m.NextLook(pair.Leaf); next.IsZero() || d.Before(next) {
			next = d
		}
	}
	if check := time.Now().Add(cfg.IssuerCheckInterval); cfg.IssuerCheckInterval > 0 && check.Before(next) {
		next = check
	}
	return next, errors.Join(errs...)
}
