package validation

import (
	"bytes"
	"sync"
	"testing"

	"rekey.io/rekey/test/fixtures"
)

// TestParseStoredCSRCache: the same bytes parse once; other bytes (even
// in the same slot) are parsed for themselves; a result never outlives the
// content it was parsed from.
func TestParseStoredCSRCache(t *testing.T) {
	a := fixtures.CSRPEM(t, fixtures.CSROptions{CommonName: "a"})
	b := fixtures.CSRPEM(t, fixtures.CSROptions{CommonName: "b"})
	first, err := ParseStoredCSR(a)
	if err != nil {
		t.Fatal(err)
	}
	again, err := ParseStoredCSR(bytes.Clone(a))
	if err != nil || again != first {
		t.Fatalf("the same request parsed again: %v", err)
	}
	other, err := ParseStoredCSR(b)
	if err != nil || other.Subject.CommonName != "b" {
		t.Fatalf("another request: %v %v", other, err)
	}
	// Every slot holding something else: a lookup compares the bytes, not
	// only the slot.
	for i := range storedCSRs {
		storedCSRs[i].Store(&parsedCSR{raw: b, csr: other})
	}
	if got, err := ParseStoredCSR(a); err != nil || got.Subject.CommonName != "a" {
		t.Fatalf("after every slot was taken by another request: %v %v", got, err)
	}
	// The cache keeps its own copy: changing the caller's bytes afterwards
	// cannot make a later lookup of them return the old result.
	// (The two PEMs differ in length with their signatures: the buffer
	// holds the longer, so that a's bytes fit whichever it is.)
	c := make([]byte, len(b), max(len(a), len(b)))
	copy(c, b)
	if _, err := ParseStoredCSR(c); err != nil {
		t.Fatal(err)
	}
	c = c[:len(a)]
	copy(c, a)
	if got, err := ParseStoredCSR(c); err != nil || got.Subject.CommonName != "a" {
		t.Fatalf("after the caller's bytes changed: %v %v", got, err)
	}
	if _, err := ParseStoredCSR([]byte("-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n")); err == nil {
		t.Fatal("a broken request parsed")
	}
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 100; j++ {
				want := "a"
				data := a
				if j%2 == 1 {
					want, data = "b", b
				}
				if got, err := ParseStoredCSR(data); err != nil || got.Subject.CommonName != want {
					t.Errorf("concurrent parse: %v %v", got, err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// TestParseCSRKeepsWhatPassedForParseStoredCSR: the create's validation
// parses and verifies the request; admission and the decision after it
// read that result instead of parsing the request again.
func TestParseCSRKeepsWhatPassedForParseStoredCSR(t *testing.T) {
	data := fixtures.CSRPEM(t, fixtures.CSROptions{CommonName: "kept"})
	validated, err := ParseCSR(data)
	if err != nil {
		t.Fatal(err)
	}
	stored, err := ParseStoredCSR(bytes.Clone(data))
	if err != nil {
		t.Fatal(err)
	}
	if stored != validated {
		t.Fatal("ParseStoredCSR parsed again what ParseCSR had just parsed")
	}
}
