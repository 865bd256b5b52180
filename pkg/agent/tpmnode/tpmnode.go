// Package tpmnode is rekey-agent's side of TPM attestation: it reads the
// EK certificate and public area, makes the attestation key, recovers a
// challenge's secret with ActivateCredential and quotes PCRs, through
// go-tpm's tpm2 commands on /dev/tpmrm0 or swtpm's raw command port.
package tpmnode

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/google/go-tpm/tpm2"
	"github.com/google/go-tpm/tpm2/transport"
	"github.com/google/go-tpm/tpm2/transport/linuxtpm"

	"rekey.io/rekey/pkg/attest"
	"rekey.io/rekey/pkg/pki"
)

// NV indexes of the EK certificates (TCG EK Credential Profile).
const (
	EKCertificateIndexRSA tpm2.TPMHandle = 0x01c00002
	EKCertificateIndexECC tpm2.TPMHandle = 0x01c0000a
)

// EKType is which of the TPM's standard EKs to use.
type EKType string

// EK types.
const (
	EKRSA EKType = "rsa"
	EKECC EKType = "ecc"
)

func (t EKType) index() tpm2.TPMHandle {
	if t == EKECC {
		return EKCertificateIndexECC
	}
	return EKCertificateIndexRSA
}

func (t EKType) template() tpm2.TPMTPublic {
	if t == EKECC {
		return tpm2.ECCEKTemplate
	}
	return tpm2.RSAEKTemplate
}

// Device is an open TPM.
type Device struct {
	tpm transport.TPMCloser
}

// Open opens a TPM: a device path (/dev/tpmrm0, a resource-managed TPM)
// or tcp://HOST:PORT (swtpm's raw TPM command port, for tests).
func Open(addr string) (*Device, error) {
	if hostPort, ok := strings.CutPrefix(addr, "tcp://"); ok {
		conn, err := net.DialTimeout("tcp", hostPort, 5*time.Second)
		if err != nil {
			return nil, fmt.Errorf("connecting to the TPM at %s: %w", addr, err)
		}
		return &Device{tpm: transport.FromReadWriteCloser(conn)}, nil
	}
	t, err := linuxtpm.Open(addr)
	if err != nil {
		return nil, fmt.Errorf("opening the TPM %s: %w", addr, err)
	}
	return &Device{tpm: t}, nil
}

// Close closes the connection.
func (d *Device) Close() error { return d.tpm.Close() }

// EKCertificate reads the RSA EK certificate from its NV index (DER,
// possibly padded).
func (d *Device) EKCertificate() ([]byte, error) { return d.EKCertificateOf(EKRSA) }

// EKCertificateOf reads the certificate of the RSA or ECC EK from its NV
// index (DER, possibly padded).
func (d *Device) EKCertificateOf(t EKType) ([]byte, error) {
	index := t.index()
	pub, err := tpm2.NVReadPublic{NVIndex: index}.Execute(d.tpm)
	if err != nil {
		return nil, fmt.Errorf("reading the EK certificate's NV index: %w", err)
	}
	nv, err := pub.NVPublic.Contents()
	if err != nil {
		return nil, err
	}
	var out []byte
	const chunk = 768 // under every TPM's NV buffer maximum (1024 on swtpm)
	for off := uint16(0); off < nv.DataSize; {
		n := min(chunk, nv.DataSize-off)
		rsp, err := tpm2.NVRead{
			AuthHandle: tpm2.AuthHandle{Handle: index, Name: pub.NVName, Auth: tpm2.PasswordAuth(nil)},
			NVIndex:    tpm2.NamedHandle{Handle: index, Name: pub.NVName},
			Size:       n, Offset: off,
		}.Execute(d.tpm)
		if err != nil {
			return nil, fmt.Errorf("reading the EK certificate: %w", err)
		}
		out = append(out, rsp.Data.Buffer...)
		off += n
	}
	return out, nil
}

// Key is a loaded TPM object.
type Key struct {
	Handle tpm2.TPMHandle
	Name   tpm2.TPM2BName
	// Public is the marshalled TPMT_PUBLIC.
	Public []byte
}

// EK loads the standard RSA EK (the TPM derives the same key every time,
// the one its certificate names). Flush it when done.
func (d *Device) EK() (*Key, error) { return d.EKOf(EKRSA) }

// EKOf loads the standard RSA or ECC EK. Flush it when done.
func (d *Device) EKOf(t EKType) (*Key, error) {
	rsp, err := tpm2.CreatePrimary{
		PrimaryHandle: tpm2.TPMRHEndorsement,
		InPublic:      tpm2.New2B(t.template()),
	}.Execute(d.tpm)
	if err != nil {
		return nil, fmt.Errorf("loading the EK: %w", err)
	}
	return &Key{Handle: rsp.ObjectHandle, Name: rsp.Name, Public: rsp.OutPublic.Bytes()}, nil
}

// CreateAK makes a new attestation key under the storage root key and
// loads it. Flush it when done.
func (d *Device) CreateAK() (*Key, error) {
	key, _, err := d.createAK()
	return key, err
}

// createAK also returns the AK's private blob (sealed by the TPM to its
// storage root key, useless elsewhere), for LoadOrCreateAK to keep.
func (d *Device) createAK() (*Key, []byte, error) {
	srk, err := d.srk()
	if err != nil {
		return nil, nil, err
	}
	defer d.Flush(srk.Handle)
	parent := tpm2.NamedHandle{Handle: srk.Handle, Name: srk.Name}
	created, err := tpm2.Create{ParentHandle: parent, InPublic: tpm2.New2B(attest.AKTemplate())}.Execute(d.tpm)
	if err != nil {
		return nil, nil, fmt.Errorf("creating the AK: %w", err)
	}
	key, err := d.loadAK(parent, tpm2.Marshal(created.OutPrivate), created.OutPublic.Bytes())
	if err != nil {
		return nil, nil, err
	}
	return key, tpm2.Marshal(created.OutPrivate), nil
}

// srk loads the storage root key (the TPM derives the same one each time).
func (d *Device) srk() (*Key, error) {
	srk, err := tpm2.CreatePrimary{PrimaryHandle: tpm2.TPMRHOwner, InPublic: tpm2.New2B(tpm2.ECCSRKTemplate)}.Execute(d.tpm)
	if err != nil {
		return nil, fmt.Errorf("loading the storage root key: %w", err)
	}
	return &Key{Handle: srk.ObjectHandle, Name: srk.Name}, nil
}

func (d *Device) loadAK(parent tpm2.NamedHandle, private, public []byte) (*Key, error) {
	priv, err := tpm2.Unmarshal[tpm2.TPM2BPrivate](private)
	if err != nil {
		return nil, fmt.Errorf("AK private blob: %w", err)
	}
	loaded, err := tpm2.Load{ParentHandle: parent, InPrivate: *priv, InPublic: tpm2.BytesAs2B[tpm2.TPMTPublic](public)}.Execute(d.tpm)
	if err != nil {
		return nil, fmt.Errorf("loading the AK: %w", err)
	}
	return &Key{Handle: loaded.ObjectHandle, Name: loaded.Name, Public: public}, nil
}

// AK files in the agent's directory: the public area and the TPM-sealed
// private blob.
const (
	AKPublicFile  = "tpm-ak.pub"
	AKPrivateFile = "tpm-ak.priv"
)

// LoadOrCreateAK loads the AK kept in dir, or makes one and keeps it
// there, so that a node keeps its AK (and the server's record of it)
// across restarts. The files are written atomically, mode 0600.
func (d *Device) LoadOrCreateAK(dir string) (*Key, error) {
	pubPath, privPath := filepath.Join(dir, AKPublicFile), filepath.Join(dir, AKPrivateFile)
	public, errPub := readNoFollow(pubPath)
	private, errPriv := readNoFollow(privPath)
	switch {
	case errPub == nil && errPriv == nil:
		srk, err := d.srk()
		if err != nil {
			return nil, err
		}
		defer d.Flush(srk.Handle)
		key, err := d.loadAK(tpm2.NamedHandle{Handle: srk.Handle, Name: srk.Name}, private, public)
		if err != nil {
			return nil, fmt.Errorf("the AK in %s and %s: %w", pubPath, privPath, err)
		}
		return key, nil
	}
	// A missing file (none yet, or a crash between the two writes) means
	// no usable AK: make one. Any other read error is reported.
	for _, err := range []error{errPub, errPriv} {
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("reading the AK files in %s: %w", dir, err)
		}
	}
	key, private, err := d.createAK()
	if err != nil {
		return nil, err
	}
	// The private blob first: a public file alone is never taken for a
	// whole AK.
	if err := pki.WriteFileAtomic(privPath, private, 0o600); err != nil {
		d.Flush(key.Handle)
		return nil, err
	}
	if err := pki.WriteFileAtomic(pubPath, key.Public, 0o600); err != nil {
		d.Flush(key.Handle)
		return nil, err
	}
	return key, nil
}

// readNoFollow reads an AK file without following a link planted in its
// place (the caller checked that only the agent's user may write dir).
func readNoFollow(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	return io.ReadAll(io.LimitReader(f, 64<<10))
}

// Flush unloads an object (swtpm has three transient slots).
func (d *Device) Flush(h tpm2.TPMHandle) {
	_, _ = tpm2.FlushContext{FlushHandle: h}.Execute(d.tpm)
}

// ActivateCredential recovers a challenge's secret: the TPM releases it
// only if it holds ek and the AK the challenge was made for.
func (d *Device) ActivateCredential(ak, ek *Key, credentialBlob, encryptedSecret []byte) ([]byte, error) {
	rsp, err := tpm2.ActivateCredential{
		ActivateHandle: tpm2.NamedHandle{Handle: ak.Handle, Name: ak.Name},
		KeyHandle: tpm2.AuthHandle{Handle: ek.Handle, Name: ek.Name,
			// The EK's policy: PolicySecret on the endorsement hierarchy.
			Auth: tpm2.Policy(tpm2.TPMAlgSHA256, 16, func(t transport.TPM, session tpm2.TPMISHPolicy, nonce tpm2.TPM2BNonce) error {
				_, err := tpm2.PolicySecret{AuthHandle: tpm2.TPMRHEndorsement, PolicySession: session, NonceTPM: nonce}.Execute(t)
				return err
			})},
		CredentialBlob: tpm2.TPM2BIDObject{Buffer: credentialBlob},
		Secret:         tpm2.TPM2BEncryptedSecret{Buffer: encryptedSecret},
	}.Execute(d.tpm)
	if err != nil {
		return nil, fmt.Errorf("activating the credential: %w", err)
	}
	return rsp.CertInfo.Buffer, nil
}

// Quote quotes the SHA-256 bank's PCRs with the AK over qualifyingData,
// and reads their values.
func (d *Device) Quote(ak *Key, qualifyingData []byte, pcrs []int) (quote, signature []byte, values map[int][]byte, err error) {
	if len(pcrs) == 0 {
		return nil, nil, nil, errors.New("no PCRs to quote")
	}
	idx := make([]uint, len(pcrs))
	for i, p := range pcrs {
		idx[i] = uint(p)
	}
	sel := tpm2.TPMLPCRSelection{PCRSelections: []tpm2.TPMSPCRSelection{{Hash: tpm2.TPMAlgSHA256, PCRSelect: tpm2.PCClientCompatible.PCRs(idx...)}}}
	rsp, err := tpm2.Quote{
		SignHandle:     tpm2.AuthHandle{Handle: ak.Handle, Name: ak.Name, Auth: tpm2.PasswordAuth(nil)},
		QualifyingData: tpm2.TPM2BData{Buffer: qualifyingData},
		InScheme:       tpm2.TPMTSigScheme{Scheme: tpm2.TPMAlgNull},
		PCRSelect:      sel,
	}.Execute(d.tpm)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("quoting: %w", err)
	}
	values, err = d.ReadPCRs(pcrs)
	if err != nil {
		return nil, nil, nil, err
	}
	return rsp.Quoted.Bytes(), tpm2.Marshal(&rsp.Signature), values, nil
}

// ReadPCRs reads SHA-256 PCR values by index.
func (d *Device) ReadPCRs(pcrs []int) (map[int][]byte, error) {
	values := map[int][]byte{}
	// PCRRead returns at most 8 values per call.
	for start := 0; start < len(pcrs); start += 8 {
		batch := make([]uint, 0, 8)
		for _, p := range pcrs[start:min(start+8, len(pcrs))] {
			batch = append(batch, uint(p))
		}
		read, err := tpm2.PCRRead{PCRSelectionIn: tpm2.TPMLPCRSelection{PCRSelections: []tpm2.TPMSPCRSelection{{Hash: tpm2.TPMAlgSHA256, PCRSelect: tpm2.PCClientCompatible.PCRs(batch...)}}}}.Execute(d.tpm)
		if err != nil {
			return nil, fmt.Errorf("reading PCRs: %w", err)
		}
		if len(read.PCRValues.Digests) != len(batch) {
			return nil, fmt.Errorf("read %d PCR values for %d PCRs", len(read.PCRValues.Digests), len(batch))
		}
		for i, p := range batch {
			values[int(p)] = read.PCRValues.Digests[i].Buffer
		}
	}
	return values, nil
}

// ExtendPCR extends a SHA-256 PCR with digest, as measured boot does (a
// test changes a node's measured state with it).
func (d *Device) ExtendPCR(pcr int, digest []byte) error {
	_, err := tpm2.PCRExtend{
		PCRHandle: tpm2.AuthHandle{Handle: tpm2.TPMHandle(pcr), Auth: tpm2.PasswordAuth(nil)},
		Digests:   tpm2.TPMLDigestValues{Digests: []tpm2.TPMTHA{{HashAlg: tpm2.TPMAlgSHA256, Digest: digest}}},
	}.Execute(d.tpm)
	if err != nil {
		return fmt.Errorf("extending PCR %d: %w", pcr, err)
	}
	return nil
}
