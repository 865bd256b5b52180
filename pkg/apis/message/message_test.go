package message

import (
	"strings"
	"testing"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

func TestCap(t *testing.T) {
	for name, tc := range map[string]struct {
		in    string
		limit int
		want  string
	}{
		"short":             {"hello", 10, "hello"},
		"exactly the limit": {"0123456789", 10, "0123456789"},
		"ASCII cut":         {strings.Repeat("a", 40), 20, strings.Repeat("a", 20-len(Marker)) + Marker},
		// "é" is two bytes: the cut never splits one.
		"cut on a rune boundary": {strings.Repeat("é", 40), 21, strings.Repeat("é", (21-len(Marker))/2) + Marker},
		"invalid UTF-8 replaced": {"a\xffb", 10, "a\uFFFDb"},
		"limit below the marker": {strings.Repeat("é", 40), 3, "é"},
	} {
		t.Run(name, func(t *testing.T) {
			got := CapTo(tc.in, tc.limit)
			if got != tc.want {
				t.Fatalf("CapTo(%q, %d) = %q, want %q", tc.in, tc.limit, got, tc.want)
			}
			if len(got) > tc.limit || !utf8.ValidString(got) {
				t.Fatalf("CapTo gave %d bytes (limit %d), valid UTF-8 %v", len(got), tc.limit, utf8.ValidString(got))
			}
		})
	}
}

// TestCapIsWhatValidationAccepts: a capped message of any length passes
// metav1's condition validation, which rekey's own kinds use, and
// MaxLength is exactly its limit (one byte more is refused).
func TestCapIsWhatValidationAccepts(t *testing.T) {
	cond := func(msg string) []metav1.Condition {
		return []metav1.Condition{{Type: "Ready", Status: metav1.ConditionFalse, Reason: "Test", Message: msg, LastTransitionTime: metav1.Now()}}
	}
	for _, in := range []string{strings.Repeat("é", 20000), strings.Repeat("a", 100000), strings.Repeat("\xff", 40000)} {
		if errs := metav1validation.ValidateConditions(cond(Cap(in)), field.NewPath("conditions")); len(errs) > 0 {
			t.Fatalf("a capped message of %d bytes is refused: %v", len(in), errs)
		}
	}
	if errs := metav1validation.ValidateConditions(cond(strings.Repeat("a", MaxLength+1)), field.NewPath("conditions")); len(errs) == 0 {
		t.Fatal("metav1 accepts more than MaxLength: the cap is lower than it needs to be")
	}
}

func TestQuote(t *testing.T) {
	if got := Quote("system:node:a"); got != `"system:node:a"` {
		t.Fatalf("short text: %s", got)
	}
	long := Quote(strings.Repeat("é", 20000))
	if len(long) > 2*MaxQuoted || !strings.Contains(long, "40000 bytes") || !utf8.ValidString(long) {
		t.Fatalf("long text quoted as %d bytes: %s", len(long), long)
	}
}
