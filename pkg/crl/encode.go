package crl

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/x509"
	"errors"
	"math/big"
	"time"
)

// createRevocationList makes the CRL x509.CreateRevocationList makes of
// the same template, byte for byte (the tests compare them), but encodes
// it by hand instead of through encoding/asn1's reflection, which for
// 100,000 entries costs most of a second and three million allocations,
// and, for a Go ECDSA or Ed25519 key in this process, does not verify the
// signature it has just made (as pkg/signing's leaf encoder: a second
// computation of the same library's result). Any other key (PKCS#11, RSA)
// and any issuer crypto/x509 would refuse goes through
// x509.CreateRevocationList, its checks included. The deprecated
// template.RevokedCertificates is not read (Issue sets the entries).
func createRevocationList(template *x509.RevocationList, issuer *x509.Certificate, key crypto.Signer) ([]byte, error) {
	sign, sigAlg, ok := inProcessSigner(key)
	if !ok || issuer.KeyUsage&x509.KeyUsageCRLSign == 0 || len(issuer.SubjectKeyId) == 0 || len(issuer.RawSubject) == 0 ||
		template.Number == nil || template.Number.Sign() < 0 || len(template.Number.Bytes()) > 20 ||
		template.NextUpdate.Before(template.ThisUpdate) || len(template.ExtraExtensions) > 0 {
		return x509.CreateRevocationList(rand.Reader, template, issuer, key)
	}
	if k, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool }); !ok || !k.Equal(issuer.PublicKey) {
		return nil, errors.New("x509: provided PrivateKey doesn't match parent's PublicKey")
	}
	var entries []byte
	for i := range template.RevokedCertificateEntries {
		e := &template.RevokedCertificateEntries[i]
		if e.SerialNumber == nil || e.SerialNumber.Sign() < 0 || len(e.ExtraExtensions) > 0 {
			return x509.CreateRevocationList(rand.Reader, template, issuer, key)
		}
		entries = appendEntry(entries, e)
	}
	var tbs []byte
	tbs = appendTLV(tbs, tagInteger, []byte{1}) // v2
	tbs = append(tbs, sigAlg...)
	tbs = append(tbs, issuer.RawSubject...)
	tbs = appendTime(tbs, template.ThisUpdate)
	tbs = appendTime(tbs, template.NextUpdate)
	if len(template.RevokedCertificateEntries) > 0 {
		tbs = appendTLV(tbs, tagSequence, entries)
	}
	// The authority key ID ([0] the issuer's subject key ID) and the CRL
	// number, as crypto/x509 writes them.
	aki := appendTLV(nil, tagSequence, appendTLV(nil, 0x80, issuer.SubjectKeyId))
	var exts []byte
	exts = appendExtension(exts, oidAuthorityKeyID, aki)
	exts = appendExtension(exts, oidCRLNumber, appendInteger(nil, template.Number))
	tbs = appendTLV(tbs, 0xa0, appendTLV(nil, tagSequence, exts))
	tbs = appendTLV(nil, tagSequence, tbs)

	signature, err := sign(tbs)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(tbs)+len(sigAlg)+len(signature)+16)
	body := append(append(append(out, tbs...), sigAlg...), appendTLV(nil, tagBitString, append([]byte{0}, signature...))...)
	return appendTLV(nil, tagSequence, body), nil
}

// DER tags.
const (
	tagInteger     = 0x02
	tagBitString   = 0x03
	tagOctetString = 0x04
	tagEnumerated  = 0x0a
	tagUTCTime     = 0x17
	tagGenTime     = 0x18
	tagSequence    = 0x30
)

// The DER of the OIDs and signature algorithms (AlgorithmIdentifiers
// without parameters) crypto/x509 writes into a CRL.
var (
	oidAuthorityKeyID = []byte{0x06, 0x03, 0x55, 0x1d, 0x23}                         // 2.5.29.35
	oidCRLNumber      = []byte{0x06, 0x03, 0x55, 0x1d, 0x14}                         // 2.5.29.20
	oidReasonCode     = []byte{0x06, 0x03, 0x55, 0x1d, 0x15}                         // 2.5.29.21
	oidECDSAWithSHA   = []byte{0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03} // 1.2.840.10045.4.3, then .2/.3/.4

	algECDSAWithSHA256 = appendTLV(nil, tagSequence, append(append([]byte{}, oidECDSAWithSHA...), 0x02))
	algECDSAWithSHA384 = appendTLV(nil, tagSequence, append(append([]byte{}, oidECDSAWithSHA...), 0x03))
	algECDSAWithSHA512 = appendTLV(nil, tagSequence, append(append([]byte{}, oidECDSAWithSHA...), 0x04))
	algEd25519         = appendTLV(nil, tagSequence, []byte{0x06, 0x03, 0x2b, 0x65, 0x70}) // 1.3.101.112
)

// inProcessSigner returns how to sign with a Go ECDSA or Ed25519 key and
// the DER of the algorithm x509.CreateRevocationList would choose for it.
func inProcessSigner(key crypto.Signer) (func([]byte) ([]byte, error), []byte, bool) {
	switch k := key.(type) {
	case *ecdsa.PrivateKey:
		switch k.Curve {
		case elliptic.P256():
			return func(tbs []byte) ([]byte, error) {
				h := sha256.Sum256(tbs)
				return ecdsa.SignASN1(rand.Reader, k, h[:])
			}, algECDSAWithSHA256, true
		case elliptic.P384():
			return func(tbs []byte) ([]byte, error) {
				h := sha512.Sum384(tbs)
				return ecdsa.SignASN1(rand.Reader, k, h[:])
			}, algECDSAWithSHA384, true
		case elliptic.P521():
			return func(tbs []byte) ([]byte, error) {
				h := sha512.Sum512(tbs)
				return ecdsa.SignASN1(rand.Reader, k, h[:])
			}, algECDSAWithSHA512, true
		}
	case ed25519.PrivateKey:
		if len(k) == ed25519.PrivateKeySize {
			return func(tbs []byte) ([]byte, error) { return ed25519.Sign(k, tbs), nil }, algEd25519, true
		}
	}
	return nil, nil, false
}

// appendEntry appends one revokedCertificates entry: serial, revocation
// date and, for a reason other than unspecified, the reason code
// extension (an entry without one has no extension list, as crypto/x509
// writes it).
func appendEntry(b []byte, e *x509.RevocationListEntry) []byte {
	var body [64]byte
	v := appendInteger(body[:0], e.SerialNumber)
	v = appendTime(v, e.RevocationTime)
	switch code := e.ReasonCode; {
	case code == 0:
	case code > 0 && code < 0x80:
		// RFC 5280's codes are all below 0x80: one content byte.
		v = appendTLV(v, tagSequence, appendExtension(nil, oidReasonCode, []byte{tagEnumerated, 1, byte(code)}))
	default:
		v = appendTLV(v, tagSequence, appendExtension(nil, oidReasonCode, appendInteger(nil, big.NewInt(int64(code)), tagEnumerated)))
	}
	return appendTLV(b, tagSequence, v)
}

// appendExtension appends a non-critical extension.
func appendExtension(b, oid, value []byte) []byte {
	var body []byte
	body = append(body, oid...)
	body = appendTLV(body, tagOctetString, value)
	return appendTLV(b, tagSequence, body)
}

// appendInteger appends n (not negative) as a DER INTEGER, or with the
// tag given (ENUMERATED).
func appendInteger(b []byte, n *big.Int, tag ...byte) []byte {
	t := byte(tagInteger)
	if len(tag) > 0 {
		t = tag[0]
	}
	v := n.Bytes()
	if len(v) == 0 || v[0]&0x80 != 0 {
		v = append([]byte{0}, v...)
	}
	return appendTLV(b, t, v)
}

// appendTime appends t as encoding/asn1 does: UTCTime from 1950 to 2049,
// else GeneralizedTime, in UTC, whole seconds.
func appendTime(b []byte, t time.Time) []byte {
	t = t.UTC()
	var buf [15]byte
	if y := t.Year(); y >= 1950 && y < 2050 {
		return appendTLV(b, tagUTCTime, t.AppendFormat(buf[:0], "060102150405Z"))
	}
	return appendTLV(b, tagGenTime, t.AppendFormat(buf[:0], "20060102150405Z"))
}

// appendTLV appends a tag, the DER length of v and v.
func appendTLV(b []byte, tag byte, v []byte) []byte {
	b = append(b, tag)
	n := len(v)
	switch {
	case n < 0x80:
		b = append(b, byte(n))
	case n < 1<<8:
		b = append(b, 0x81, byte(n))
	case n < 1<<16:
		b = append(b, 0x82, byte(n>>8), byte(n))
	case n < 1<<24:
		b = append(b, 0x83, byte(n>>16), byte(n>>8), byte(n))
	default:
		b = append(b, 0x84, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	}
	return append(b, v...)
}
