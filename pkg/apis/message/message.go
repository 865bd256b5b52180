// Package message bounds the free-form text rekey writes into conditions
// and events. Validation refuses a condition message over MaxLength bytes
// on every later write of the object, so a message rekey stored too long
// (one quoting a requester's 20,000-character subject, say) would make the
// object impossible to update: every writer caps what it writes here.
package message

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

const (
	// MaxLength is the longest condition message validation accepts, in
	// bytes: metav1's limit for metav1.Conditions and rekey's for
	// CertificateSigningRequest conditions.
	MaxLength = 32 * 1024
	// MaxEventLength caps event messages: events.k8s.io/v1 refuses a note
	// over 1 KiB, and an event is a hint, not the record.
	MaxEventLength = 1024
	// MaxQuoted is how much of a client's text Quote keeps.
	MaxQuoted = 128
	// Marker ends a message that was cut.
	Marker = "… [truncated]"
)

// Cap returns s as a condition message: valid UTF-8 and at most MaxLength
// bytes, cut on a character boundary and ending with Marker when cut.
func Cap(s string) string { return CapTo(s, MaxLength) }

// CapEvent is Cap for an event message.
func CapEvent(s string) string { return CapTo(s, MaxEventLength) }

// CapTo is Cap with another limit. Invalid UTF-8 is replaced first: stored
// as JSON it would become U+FFFD (three bytes for one) and grow past the
// limit after the check.
func CapTo(s string, limit int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= limit {
		return s
	}
	marker := Marker
	if limit < len(marker) {
		marker = ""
	}
	return prefix(s, limit-len(marker)) + marker
}

// Quote quotes a client's text (a subject attribute, a name taken from a
// request) for a message: in full when short, else its first MaxQuoted
// bytes and its length. A message says what was refused; it need not
// repeat a hostile value at length.
func Quote(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= MaxQuoted {
		return strconv.Quote(s)
	}
	return fmt.Sprintf("%s… (%d bytes)", strconv.Quote(prefix(s, MaxQuoted)), len(s))
}

// prefix is the longest prefix of valid UTF-8 s of at most n bytes that
// does not split a character.
func prefix(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
