package strictpem

import (
	"encoding/pem"
	"strings"
	"testing"
)

func block(t, body string) string {
	return string(pem.EncodeToMemory(&pem.Block{Type: t, Bytes: []byte(body)}))
}

// indentLastLine breaks a block the way `sed '$ s/^/ /'` does: the END line
// no longer starts at the beginning of a line, so encoding/pem skips it.
func indentLastLine(s string) string {
	s = strings.TrimSuffix(s, "\n")
	i := strings.LastIndex(s, "\n")
	return s[:i+1] + " " + s[i+1:] + "\n"
}

func TestDecode(t *testing.T) {
	a, b := block("CERTIFICATE REQUEST", "benign"), block("CERTIFICATE REQUEST", "evil")
	tests := []struct {
		name    string
		in      string
		want    int
		wantErr string
	}{
		{name: "one block", in: a, want: 1},
		{name: "whitespace around", in: "\n\t  " + a + "\n\n", want: 1},
		{name: "two blocks", in: a + "\n" + b, want: 2},
		{name: "empty", in: "", want: 0},
		{name: "text before", in: "Subject: benign\n" + a, wantErr: "must start with a PEM block"},
		{name: "text between", in: a + "explanatory text\n" + b, wantErr: "unexpected text after PEM block 0"},
		{name: "text after", in: a + "trailing", wantErr: "unexpected text after PEM block 0"},
		{name: "broken block hides a second one", in: indentLastLine(a) + b, wantErr: "PEM block 0 is malformed"},
		{name: "broken block alone", in: indentLastLine(a), wantErr: "PEM block 0 is malformed"},
		{name: "too many", in: a + b + a, wantErr: "more than 2 PEM blocks"},
		{name: "headers", in: "-----BEGIN X-----\nProc-Type: 4,ENCRYPTED\n\nYWJj\n-----END X-----\n", wantErr: "must not have headers"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Decode([]byte(tt.in), 2)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != tt.want {
				t.Fatalf("got %d blocks, want %d", len(got), tt.want)
			}
		})
	}
}

func TestDecodeOne(t *testing.T) {
	a := block("CERTIFICATE REQUEST", "benign")
	if _, err := DecodeOne([]byte(a), "CERTIFICATE REQUEST"); err != nil {
		t.Fatal(err)
	}
	for in, want := range map[string]string{
		"":                        "no PEM data found",
		a + a:                     "exactly one PEM block",
		block("CERTIFICATE", "x"): "must be \"CERTIFICATE REQUEST\", got \"CERTIFICATE\"",
		indentLastLine(a) + a:     "exactly one PEM block",
		"MIIB" + a:                "must start with a PEM block",
	} {
		_, err := DecodeOne([]byte(in), "CERTIFICATE REQUEST")
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("DecodeOne(%.30q) error = %v, want %q", in, err, want)
		}
	}
}

func FuzzDecode(f *testing.F) {
	a := block("CERTIFICATE REQUEST", "benign")
	f.Add([]byte(a))
	f.Add([]byte(indentLastLine(a) + a))
	f.Add([]byte("text\n" + a))
	f.Fuzz(func(t *testing.T, data []byte) {
		blocks, err := Decode(data, 4)
		if err != nil {
			return
		}
		// Whatever is accepted must read the same with encoding/pem: the
		// same blocks in the same order, and nothing left over.
		rest := data
		for i, b := range blocks {
			var got *pem.Block
			got, rest = pem.Decode(rest)
			if got == nil || got.Type != b.Type || string(got.Bytes) != string(b.Bytes) {
				t.Fatalf("block %d differs from encoding/pem's reading", i)
			}
		}
		if next, _ := pem.Decode(rest); next != nil {
			t.Fatalf("encoding/pem finds a block after the %d accepted ones", len(blocks))
		}
	})
}

func TestCertificates(t *testing.T) {
	cert := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("not DER")}))
	for in, want := range map[string]string{
		"":                                "at least one PEM block",
		block("CERTIFICATE REQUEST", "x"): `only "CERTIFICATE" is allowed`,
		cert:                              "not a valid X.509 certificate",
		cert + cert:                       "more than 1 PEM blocks",
	} {
		if _, err := Certificates([]byte(in), 1); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Certificates(%.30q) error = %v, want %q", in, err, want)
		}
	}
}
