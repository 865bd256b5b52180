package signing

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"errors"
	"fmt"
	"math/big"
	"math/bits"
	"time"
	"unicode/utf8"
)

// createCertificate makes the certificate x509.CreateCertificate makes of a
// leaf template as Issue fills it, byte for byte, but for a CA key that is
// a Go ECDSA or Ed25519 key in this process it does not verify the
// signature it has just made. x509.CreateCertificate always does, to catch
// a crypto.Signer that returns a wrong signature (a faulty HSM, a broken
// remote signer); for Go's own ECDSA and Ed25519 that check is a second
// computation of the same library's result and costs more than the
// signature itself (an ECDSA P-256 verification is about twice a
// signature). Every other key — PKCS#11 handles, RSA, anything else — and
// every template field this encoder does not know goes through
// x509.CreateCertificate, check included. The tests compare the encoding
// with x509.CreateCertificate's for every field Issue sets.
func createCertificate(template, parent *x509.Certificate, pub any, key crypto.Signer) ([]byte, error) {
	sign, sigAlg, ok := inProcessSigner(key)
	if !ok || !encodable(template) {
		return x509.CreateCertificate(rand.Reader, template, parent, pub, key)
	}
	if parent.PublicKey != nil {
		if k, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool }); !ok || !k.Equal(parent.PublicKey) {
			return nil, errors.New("x509: provided PrivateKey doesn't match parent's PublicKey")
		}
	}
	tbs, err := encodeTBS(template, parent, pub, sigAlg)
	if err != nil {
		return nil, err
	}
	signature, err := sign(tbs)
	if err != nil {
		return nil, err
	}
	return asn1.Marshal(certificate{
		TBSCertificate:     asn1.RawValue{FullBytes: tbs},
		SignatureAlgorithm: sigAlg,
		SignatureValue:     asn1.BitString{Bytes: signature, BitLength: 8 * len(signature)},
	})
}

var (
	oidSignatureECDSAWithSHA256 = asn1.ObjectIdentifier{1, 2, 840, 10045, 4, 3, 2}
	oidSignatureECDSAWithSHA384 = asn1.ObjectIdentifier{1, 2, 840, 10045, 4, 3, 3}
	oidSignatureECDSAWithSHA512 = asn1.ObjectIdentifier{1, 2, 840, 10045, 4, 3, 4}
	oidSignatureEd25519         = asn1.ObjectIdentifier{1, 3, 101, 112}

	oidExtensionKeyUsage         = asn1.ObjectIdentifier{2, 5, 29, 15}
	oidExtensionExtendedKeyUsage = asn1.ObjectIdentifier{2, 5, 29, 37}
	oidExtensionBasicConstraints = asn1.ObjectIdentifier{2, 5, 29, 19}
	oidExtensionSubjectKeyID     = asn1.ObjectIdentifier{2, 5, 29, 14}
	oidExtensionAuthorityKeyID   = asn1.ObjectIdentifier{2, 5, 29, 35}
	oidExtensionSubjectAltName   = asn1.ObjectIdentifier{2, 5, 29, 17}
	oidExtensionCRLDistPoints    = asn1.ObjectIdentifier{2, 5, 29, 31}
)

// extKeyUsageOIDs are RFC 5280's and the vendors' OIDs for the extended key
// usages crypto/x509 knows; a usage missing here sends the template to
// x509.CreateCertificate.
var extKeyUsageOIDs = map[x509.ExtKeyUsage]asn1.ObjectIdentifier{
	x509.ExtKeyUsageAny:                            {2, 5, 29, 37, 0},
	x509.ExtKeyUsageServerAuth:                     {1, 3, 6, 1, 5, 5, 7, 3, 1},
	x509.ExtKeyUsageClientAuth:                     {1, 3, 6, 1, 5, 5, 7, 3, 2},
	x509.ExtKeyUsageCodeSigning:                    {1, 3, 6, 1, 5, 5, 7, 3, 3},
	x509.ExtKeyUsageEmailProtection:                {1, 3, 6, 1, 5, 5, 7, 3, 4},
	x509.ExtKeyUsageIPSECEndSystem:                 {1, 3, 6, 1, 5, 5, 7, 3, 5},
	x509.ExtKeyUsageIPSECTunnel:                    {1, 3, 6, 1, 5, 5, 7, 3, 6},
	x509.ExtKeyUsageIPSECUser:                      {1, 3, 6, 1, 5, 5, 7, 3, 7},
	x509.ExtKeyUsageTimeStamping:                   {1, 3, 6, 1, 5, 5, 7, 3, 8},
	x509.ExtKeyUsageOCSPSigning:                    {1, 3, 6, 1, 5, 5, 7, 3, 9},
	x509.ExtKeyUsageMicrosoftServerGatedCrypto:     {1, 3, 6, 1, 4, 1, 311, 10, 3, 3},
	x509.ExtKeyUsageNetscapeServerGatedCrypto:      {2, 16, 840, 1, 113730, 4, 1},
	x509.ExtKeyUsageMicrosoftCommercialCodeSigning: {1, 3, 6, 1, 4, 1, 311, 2, 1, 22},
	x509.ExtKeyUsageMicrosoftKernelCodeSigning:     {1, 3, 6, 1, 4, 1, 311, 61, 1, 1},
}

// inProcessSigner returns how to sign with key and the signature algorithm
// x509.CreateCertificate would choose for it, for Go's ECDSA and Ed25519
// keys only.
func inProcessSigner(key crypto.Signer) (func(tbs []byte) ([]byte, error), pkix.AlgorithmIdentifier, bool) {
	switch k := key.(type) {
	case *ecdsa.PrivateKey:
		switch k.Curve {
		case elliptic.P256():
			return func(tbs []byte) ([]byte, error) {
				h := sha256.Sum256(tbs)
				return ecdsa.SignASN1(rand.Reader, k, h[:])
			}, pkix.AlgorithmIdentifier{Algorithm: oidSignatureECDSAWithSHA256}, true
		case elliptic.P384():
			return func(tbs []byte) ([]byte, error) {
				h := sha512.Sum384(tbs)
				return ecdsa.SignASN1(rand.Reader, k, h[:])
			}, pkix.AlgorithmIdentifier{Algorithm: oidSignatureECDSAWithSHA384}, true
		case elliptic.P521():
			return func(tbs []byte) ([]byte, error) {
				h := sha512.Sum512(tbs)
				return ecdsa.SignASN1(rand.Reader, k, h[:])
			}, pkix.AlgorithmIdentifier{Algorithm: oidSignatureECDSAWithSHA512}, true
		}
	case ed25519.PrivateKey:
		if len(k) != ed25519.PrivateKeySize {
			break
		}
		return func(tbs []byte) ([]byte, error) {
			return ed25519.Sign(k, tbs), nil
		}, pkix.AlgorithmIdentifier{Algorithm: oidSignatureEd25519}, true
	}
	return nil, pkix.AlgorithmIdentifier{}, false
}

// encodable says whether the template sets only what encodeTBS encodes:
// the fields Issue sets (CRL distribution points included), a leaf's basic
// constraints and known extended key usages.
func encodable(t *x509.Certificate) bool {
	if t.SerialNumber == nil || t.SerialNumber.Sign() < 0 || t.IsCA || !t.BasicConstraintsValid ||
		t.MaxPathLen != 0 || t.MaxPathLenZero || t.SignatureAlgorithm != x509.UnknownSignatureAlgorithm ||
		len(t.RawSubject) > 0 || len(t.AuthorityKeyId) > 0 || len(t.UnknownExtKeyUsage) > 0 ||
		len(t.ExtraExtensions) > 0 || len(t.OCSPServer) > 0 || len(t.IssuingCertificateURL) > 0 ||
		len(t.PolicyIdentifiers) > 0 || len(t.Policies) > 0 ||
		len(t.PermittedDNSDomains) > 0 || len(t.ExcludedDNSDomains) > 0 || len(t.PermittedIPRanges) > 0 ||
		len(t.ExcludedIPRanges) > 0 || len(t.PermittedEmailAddresses) > 0 || len(t.ExcludedEmailAddresses) > 0 ||
		len(t.PermittedURIDomains) > 0 || len(t.ExcludedURIDomains) > 0 || t.PermittedDNSDomainsCritical {
		return false
	}
	for _, u := range t.ExtKeyUsage {
		if _, ok := extKeyUsageOIDs[u]; !ok {
			return false
		}
	}
	return true
}

type certificate struct {
	TBSCertificate     asn1.RawValue
	SignatureAlgorithm pkix.AlgorithmIdentifier
	SignatureValue     asn1.BitString
}

type tbsCertificate struct {
	Version            int `asn1:"optional,explicit,default:0,tag:0"`
	SerialNumber       *big.Int
	SignatureAlgorithm pkix.AlgorithmIdentifier
	Issuer             asn1.RawValue
	Validity           validity
	Subject            asn1.RawValue
	PublicKey          asn1.RawValue
	Extensions         []pkix.Extension `asn1:"omitempty,optional,explicit,tag:3"`
}

type validity struct {
	NotBefore, NotAfter time.Time
}

type basicConstraints struct {
	IsCA       bool `asn1:"optional"`
	MaxPathLen int  `asn1:"optional,default:-1"`
}

type authorityKeyID struct {
	ID []byte `asn1:"optional,tag:0"`
}

// emptySubject is the DER of an empty Name.
var emptySubject = []byte{0x30, 0}

// encodeTBS encodes the to-be-signed certificate as x509.CreateCertificate
// does for an encodable template.
func encodeTBS(t, parent *x509.Certificate, pub any, sigAlg pkix.AlgorithmIdentifier) ([]byte, error) {
	spki, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, err
	}
	issuer := parent.RawSubject
	if len(issuer) == 0 {
		if issuer, err = asn1.Marshal(parent.Subject.ToRDNSequence()); err != nil {
			return nil, err
		}
	}
	subject, err := asn1.Marshal(t.Subject.ToRDNSequence())
	if err != nil {
		return nil, err
	}
	var akid []byte
	if !bytes.Equal(issuer, subject) {
		akid = parent.SubjectKeyId
	}
	exts, err := leafExtensions(t, bytes.Equal(subject, emptySubject), akid)
	if err != nil {
		return nil, err
	}
	return asn1.Marshal(tbsCertificate{
		Version:            2,
		SerialNumber:       t.SerialNumber,
		SignatureAlgorithm: sigAlg,
		Issuer:             asn1.RawValue{FullBytes: issuer},
		Validity:           validity{t.NotBefore.UTC(), t.NotAfter.UTC()},
		Subject:            asn1.RawValue{FullBytes: subject},
		PublicKey:          asn1.RawValue{FullBytes: spki},
		Extensions:         exts,
	})
}

// leafExtensions are a leaf's extensions in crypto/x509's order: key usage,
// extended key usage, basic constraints, subject and authority key IDs,
// subject alternative names, CRL distribution points.
func leafExtensions(t *x509.Certificate, subjectIsEmpty bool, akid []byte) ([]pkix.Extension, error) {
	exts := make([]pkix.Extension, 0, 7)
	if t.KeyUsage != 0 {
		v, err := marshalKeyUsage(t.KeyUsage)
		if err != nil {
			return nil, err
		}
		exts = append(exts, pkix.Extension{Id: oidExtensionKeyUsage, Critical: true, Value: v})
	}
	if len(t.ExtKeyUsage) > 0 {
		oids := make([]asn1.ObjectIdentifier, len(t.ExtKeyUsage))
		for i, u := range t.ExtKeyUsage {
			oids[i] = extKeyUsageOIDs[u]
		}
		v, err := asn1.Marshal(oids)
		if err != nil {
			return nil, err
		}
		exts = append(exts, pkix.Extension{Id: oidExtensionExtendedKeyUsage, Value: v})
	}
	v, err := asn1.Marshal(basicConstraints{IsCA: false, MaxPathLen: -1})
	if err != nil {
		return nil, err
	}
	exts = append(exts, pkix.Extension{Id: oidExtensionBasicConstraints, Critical: true, Value: v})
	if len(t.SubjectKeyId) > 0 {
		v, err := asn1.Marshal(t.SubjectKeyId)
		if err != nil {
			return nil, err
		}
		exts = append(exts, pkix.Extension{Id: oidExtensionSubjectKeyID, Value: v})
	}
	if len(akid) > 0 {
		v, err := asn1.Marshal(authorityKeyID{akid})
		if err != nil {
			return nil, err
		}
		exts = append(exts, pkix.Extension{Id: oidExtensionAuthorityKeyID, Value: v})
	}
	if len(t.DNSNames) > 0 || len(t.EmailAddresses) > 0 || len(t.IPAddresses) > 0 || len(t.URIs) > 0 {
		v, err := marshalSANs(t)
		if err != nil {
			return nil, err
		}
		// RFC 5280, 4.2.1.6: with an empty subject the names are critical.
		exts = append(exts, pkix.Extension{Id: oidExtensionSubjectAltName, Critical: subjectIsEmpty, Value: v})
	}
	if len(t.CRLDistributionPoints) > 0 {
		v, err := marshalCRLDistributionPoints(t.CRLDistributionPoints)
		if err != nil {
			return nil, err
		}
		exts = append(exts, pkix.Extension{Id: oidExtensionCRLDistPoints, Value: v})
	}
	return exts, nil
}

// distributionPoint and distributionPointName are RFC 5280's (4.2.1.13),
// with only the full name crypto/x509 fills.
type distributionPoint struct {
	DistributionPoint distributionPointName `asn1:"optional,tag:0"`
}

type distributionPointName struct {
	FullName []asn1.RawValue `asn1:"optional,tag:0"`
}

// marshalCRLDistributionPoints encodes one distribution point per URL, each
// a full name of one URI, as crypto/x509 does. crypto/x509 does not check
// that a URL is IA5; the Signer's validation does, and this encoder
// refuses one that is not rather than write a malformed certificate.
func marshalCRLDistributionPoints(urls []string) ([]byte, error) {
	points := make([]distributionPoint, 0, len(urls))
	for _, u := range urls {
		if err := ia5(u); err != nil {
			return nil, err
		}
		points = append(points, distributionPoint{DistributionPoint: distributionPointName{
			FullName: []asn1.RawValue{{Tag: nameTypeURI, Class: asn1.ClassContextSpecific, Bytes: []byte(u)}},
		}})
	}
	return asn1.Marshal(points)
}

// marshalKeyUsage encodes the key usage bits as a BIT STRING whose first
// bit is digitalSignature, without trailing zero bits.
func marshalKeyUsage(ku x509.KeyUsage) ([]byte, error) {
	b := []byte{bits.Reverse8(byte(ku)), bits.Reverse8(byte(ku >> 8))}
	if b[1] == 0 {
		b = b[:1]
	}
	// ku is not 0 (the caller checks), so the last byte kept is not.
	return asn1.Marshal(asn1.BitString{Bytes: b, BitLength: 8*len(b) - bits.TrailingZeros8(b[len(b)-1])})
}

// General name tags (RFC 5280, 4.2.1.6).
const (
	nameTypeEmail = 1
	nameTypeDNS   = 2
	nameTypeURI   = 6
	nameTypeIP    = 7
)

func marshalSANs(t *x509.Certificate) ([]byte, error) {
	names := make([]asn1.RawValue, 0, len(t.DNSNames)+len(t.EmailAddresses)+len(t.IPAddresses)+len(t.URIs))
	for _, n := range t.DNSNames {
		if err := ia5(n); err != nil {
			return nil, err
		}
		names = append(names, asn1.RawValue{Tag: nameTypeDNS, Class: asn1.ClassContextSpecific, Bytes: []byte(n)})
	}
	for _, e := range t.EmailAddresses {
		if err := ia5(e); err != nil {
			return nil, err
		}
		names = append(names, asn1.RawValue{Tag: nameTypeEmail, Class: asn1.ClassContextSpecific, Bytes: []byte(e)})
	}
	for _, ip := range t.IPAddresses {
		b := ip.To4()
		if b == nil {
			b = ip
		}
		names = append(names, asn1.RawValue{Tag: nameTypeIP, Class: asn1.ClassContextSpecific, Bytes: b})
	}
	for _, u := range t.URIs {
		s := u.String()
		if err := ia5(s); err != nil {
			return nil, err
		}
		names = append(names, asn1.RawValue{Tag: nameTypeURI, Class: asn1.ClassContextSpecific, Bytes: []byte(s)})
	}
	return asn1.Marshal(names)
}

func ia5(s string) error {
	for _, r := range s {
		if r >= utf8.RuneSelf {
			return fmt.Errorf("x509: %q cannot be encoded as an IA5String", s)
		}
	}
	return nil
}
