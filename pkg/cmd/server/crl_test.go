package server

import (
	"io"
	"testing"
	"time"

	"rekey.io/rekey/pkg/apiserver"
)

func TestCRLOptions(t *testing.T) {
	o := NewOptions(io.Discard, io.Discard)
	if o.CRL.Validity != 24*time.Hour {
		t.Fatalf("default --crl-validity %s, want 24h", o.CRL.Validity)
	}
	check(t, o.CRL.Validate(), "")
	fss := o.Flags()
	if err := fss.FlagSet("rekey").Parse([]string{"--crl-validity=2m"}); err != nil {
		t.Fatal(err)
	}
	check(t, o.CRL.Validate(), "")
	var c apiserver.ExtraConfig
	o.CRL.ApplyTo(&c)
	if c.CRLValidity != 2*time.Minute {
		t.Fatalf("applied %s, want 2m", c.CRLValidity)
	}
	o.CRL.Validity = time.Minute + 59*time.Second
	check(t, o.CRL.Validate(), "--crl-validity 1m59s: must be at least 2m0s")
}
