package certificateauthority

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	"rekey.io/rekey/pkg/authority"
	"rekey.io/rekey/pkg/jwtkey"
)

// TokenExpiryLeeway is added to maxTokenExpiration in
// status.previous.tokensExpireTime: the sum of the clock tolerances
// (jwtkey.TokenExpiryLeeway: a replica signing with the old key until the
// Prepared status reaches it, signjwt's slack on exp, a kube-apiserver's
// clock behind, kube-apiserver's leeway past exp).
const TokenExpiryLeeway = jwtkey.TokenExpiryLeeway

// isTokenKey says whether the CA's key signs service-account tokens (and
// so nothing else).
func isTokenKey(ca *rotationv1alpha1.CertificateAuthority) bool {
	return ca.Spec.Purpose == rotationv1alpha1.PurposeServiceAccountTokens
}

// maxTokenExpiration is the CA's spec.serviceAccountTokens.maxTokenExpiration,
// or its default where the object was not defaulted.
func maxTokenExpiration(ca *rotationv1alpha1.CertificateAuthority) time.Duration {
	if t := ca.Spec.ServiceAccountTokens; t != nil && t.MaxTokenExpiration != nil {
		return t.MaxTokenExpiration.Duration
	}
	return rotationv1alpha1.DefaultMaxTokenExpiration
}

// describeTokenKeys fills in, for a ServiceAccountTokens CA, the kid of
// every key status shows (what jwt-signer serves and kube-apiserver
// matches tokens by) and when the previous key's last token expires: it
// stopped signing about when the rotation became Prepared
// (lastInitiationFinishedTime, taken at the start of the step that
// promotes and rounded up to the second; signjwt refuses the previous key
// once a replica sees Prepared, in its watch cache or in a quorum read at
// most ReplicaLag/2 old, which jwtkey.ReplicaLag within TokenExpiryLeeway
// covers), and signed no token living longer than
// maxTokenExpiration. Both are derived from status and spec alone, so
// every sync writes the same.
func describeTokenKeys(ca *rotationv1alpha1.CertificateAuthority, status *rotationv1alpha1.CertificateAuthorityStatus) error {
	if !isTokenKey(ca) {
		return nil
	}
	for which, c := range map[string]*rotationv1alpha1.CACertificate{"current": status.Current, "next": status.Next, "previous": status.Previous} {
		if c == nil {
			continue
		}
		cert, err := authority.ParseCertificatePEM(c.Certificate)
		if err != nil {
			return fmt.Errorf("the %s certificate: %w", which, err)
		}
		kid, err := jwtkey.KeyID(cert.PublicKey)
		if err != nil {
			return fmt.Errorf("the %s key: %w", which, err)
		}
		c.TokenKeyID = kid
		c.TokensExpireTime = nil
	}
	if prev, finished := status.Previous, status.LastInitiationFinishedTime; prev != nil && finished != nil {
		t := metav1.NewTime(finished.Add(maxTokenExpiration(ca) + TokenExpiryLeeway))
		prev.TokensExpireTime = &t
	}
	return nil
}
