package certificateauthority

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	"rekey.io/rekey/pkg/authority"
	"rekey.io/rekey/pkg/issuance"
	"rekey.io/rekey/pkg/jwtkey"
	"rekey.io/rekey/pkg/signing/signingtest"
)

// TestTokenExpiryLeewayCoversEveryTolerance: a token of the previous key
// may still be accepted this long after Prepared + maxTokenExpiration: a
// replica signing with the old key until the Prepared status reaches it
// (ReplicaLag), exp up to ExpiryLeeway past that replica's now + max, a
// verifying kube-apiserver's clock behind by up to ClockSkew, and
// kube-apiserver's own leeway past exp (VerifierLeeway).
func TestTokenExpiryLeewayCoversEveryTolerance(t *testing.T) {
	sum := jwtkey.ReplicaLag + jwtkey.ExpiryLeeway + jwtkey.ClockSkew + jwtkey.VerifierLeeway
	if TokenExpiryLeeway < sum {
		t.Fatalf("TokenExpiryLeeway %s < %s, the sum of the tolerances", TokenExpiryLeeway, sum)
	}
	if jwtkey.VerifierLeeway < time.Minute {
		t.Fatalf("VerifierLeeway %s is less than go-jose's default leeway (1m) that kube-apiserver verifies with", jwtkey.VerifierLeeway)
	}
}

func tokenKeyCA() *rotationv1alpha1.CertificateAuthority {
	ca := newCA("sa-key", "0123456789")
	ca.Spec.Purpose = rotationv1alpha1.PurposeServiceAccountTokens
	ca.Spec.ServiceAccountTokens = &rotationv1alpha1.ServiceAccountTokenKeys{MaxTokenExpiration: &metav1.Duration{Duration: 2 * time.Hour}}
	return ca
}

// kidOf is the kid of a status entry's key, computed here from its
// certificate.
func kidOf(t *testing.T, c *rotationv1alpha1.CACertificate) string {
	t.Helper()
	cert, err := authority.ParseCertificatePEM(c.Certificate)
	if err != nil {
		t.Fatal(err)
	}
	kid, err := jwtkey.KeyID(cert.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	return kid
}

// TestTokenKeyStatus: a ServiceAccountTokens CA's status names the kid of
// each key (current, next while Preparing, previous once Prepared), the
// previous key's tokensExpireTime is when the rotation became Prepared plus
// maxTokenExpiration and a minute, and nothing is counted as pending
// renewal (a token key issues no certificates).
func TestTokenKeyStatus(t *testing.T) {
	ctx := context.Background()
	ca := tokenKeyCA()
	c, client, _ := newTestController(t, ca, signingtest.NewMemoryKeys())
	records := &fakeRecords{rev: 1}
	c.records = records
	if _, err := c.Handle(ctx, ca); err != nil {
		t.Fatal(err)
	}
	bound := statusUpdate(t, client)
	if cur := bound.Status.Current; cur == nil || cur.TokenKeyID == "" || cur.TokenKeyID != kidOf(t, cur) || cur.TokensExpireTime != nil {
		t.Fatalf("current %+v, want its kid and no tokensExpireTime", cur)
	}

	prepared, preparing := prepare(t, c, client, bound)
	if next := preparing.Status.Next; next.TokenKeyID != kidOf(t, next) || next.TokenKeyID == bound.Status.Current.TokenKeyID {
		t.Fatalf("Preparing: next %+v, want the new key's kid", next)
	}
	if cur := preparing.Status.Current; cur.TokenKeyID != bound.Status.Current.TokenKeyID {
		t.Fatalf("Preparing: current kid %s, want the old key's %s (it still signs)", cur.TokenKeyID, bound.Status.Current.TokenKeyID)
	}
	prev, cur := prepared.Status.Previous, prepared.Status.Current
	if prev == nil || prev.TokenKeyID != bound.Status.Current.TokenKeyID || cur.TokenKeyID != preparing.Status.Next.TokenKeyID || cur.TokensExpireTime != nil {
		t.Fatalf("Prepared: current %+v previous %+v, want the keys swapped with their kids", cur, prev)
	}
	want := prepared.Status.LastInitiationFinishedTime.Add(2*time.Hour + TokenExpiryLeeway)
	if prev.TokensExpireTime == nil || !prev.TokensExpireTime.Time.Equal(want) {
		t.Fatalf("previous.tokensExpireTime %v, want %v (Prepared + maxTokenExpiration + %s)", prev.TokensExpireTime, want, TokenExpiryLeeway)
	}

	// Prepared again: nothing to count, nothing to write, no recount timer.
	records.add(issuance.Record{Serial: "1", CAKeyID: prev.KeyID, NotAfter: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)})
	client.ClearActions()
	recheck, err := c.Handle(ctx, prepared)
	if err != nil {
		t.Fatal(err)
	}
	if len(client.Actions()) != 0 || records.scans != 0 || recheck != 0 {
		t.Fatalf("a Prepared token key: actions %v, %d scans, recheck %v; want none", client.Actions(), records.scans, recheck)
	}
	if prepared.Status.PendingRenewal != 0 || prepared.Status.PendingRenewals != nil {
		t.Fatalf("pending %d %v", prepared.Status.PendingRenewal, prepared.Status.PendingRenewals)
	}

	// Completing drops the previous key and its expiry.
	completing := prepared.DeepCopy()
	completing.Status.Phase = rotationv1alpha1.PhaseCompleting
	client.ClearActions()
	if _, err := c.Handle(ctx, completing); err != nil {
		t.Fatal(err)
	}
	if done := statusUpdate(t, client); done.Status.Previous != nil || done.Status.Current.TokenKeyID != cur.TokenKeyID {
		t.Fatalf("Completed: %+v", done.Status)
	}
}

// TestCertificateCAHasNoTokenFields: a Certificates CA's status carries no
// kid.
func TestCertificateCAHasNoTokenFields(t *testing.T) {
	ca := newCA("team-ca", "0123456789")
	c, client, _ := newTestController(t, ca, signingtest.NewMemoryKeys())
	if _, err := c.Handle(context.Background(), ca); err != nil {
		t.Fatal(err)
	}
	prepared, _ := prepare(t, c, client, statusUpdate(t, client))
	if prepared.Status.Current.TokenKeyID != "" || prepared.Status.Previous.TokenKeyID != "" || prepared.Status.Previous.TokensExpireTime != nil {
		t.Fatalf("a Certificates CA: %+v %+v", prepared.Status.Current, prepared.Status.Previous)
	}
}
