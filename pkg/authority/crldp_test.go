package authority

import (
	"slices"
	"testing"
)

func TestCRLDistributionPointsNameTheSigningKey(t *testing.T) {
	auth := &Authority{Name: "kube-client", KeyID: "ca-0f1e"}
	got := crlDistributionPoints([]string{"https://rekey.example.com/crl/$(caName)/$(keyID)", "http://crl.example.com/$(caName).crl"}, auth)
	want := []string{"https://rekey.example.com/crl/kube-client/ca-0f1e", "http://crl.example.com/kube-client.crl"}
	if !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
	if got := crlDistributionPoints(nil, auth); got != nil {
		t.Fatalf("a signer without distribution points got %q", got)
	}
}
