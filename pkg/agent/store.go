package agent

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"rekey.io/rekey/pkg/signing"
	"rekey.io/rekey/pkg/strictpem"
)

// Prefixes of the files a Store keeps, as the kubelet names its own.
const (
	PrefixClient = "rekey-client"
	PrefixServer = "rekey-server"
)

// maxPairBytes bounds what is read from a pair file before parsing.
const maxPairBytes = 256 << 10

// ErrNoCertificate means the store holds no current pair.
var ErrNoCertificate = errors.New("no current certificate")

// Store keeps certificate and key pairs in Dir: each pair in
// <prefix>-<timestamp>.pem (certificate chain, then the PKCS#8 key; mode
// 0600), the one in use named by the symlink <prefix>-current.pem, which is
// replaced by a rename so that a reader always finds a whole pair. The key
// of a request not yet answered waits in <prefix>.key.tmp.
type Store struct {
	Dir    string
	Prefix string
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

func (s *Store) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// CurrentPath is the symlink to the pair in use.
func (s *Store) CurrentPath() string { return filepath.Join(s.Dir, s.Prefix+"-current.pem") }

func (s *Store) pendingKeyPath() string { return filepath.Join(s.Dir, s.Prefix+".key.tmp") }

// Current returns the pair in use, with its leaf parsed. A pair that does
// not parse, whose key is not the certificate's, or whose certificate has
// expired (or is not valid yet) is an error: it is never used. Nor is a
// pair outside Dir: the current link must name a pair file in Dir, which
// must itself be a regular file only its owner may read (see openPrivate).
func (s *Store) Current() (*tls.Certificate, error) {
	if err := CheckDir(s.Dir); err != nil {
		return nil, err
	}
	path, err := s.currentPair()
	if errors.Is(err, fs.ErrNotExist) {
		return nil, ErrNoCertificate
	}
	if err != nil {
		return nil, err
	}
	data, err := readPrivate(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, ErrNoCertificate
	}
	if err != nil {
		return nil, err
	}
	pair, err := parsePair(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.CurrentPath(), err)
	}
	now := s.now()
	if now.After(pair.Leaf.NotAfter) || now.Before(pair.Leaf.NotBefore) {
		return nil, fmt.Errorf("%s: the certificate is valid from %s to %s, not now", s.CurrentPath(),
			pair.Leaf.NotBefore.UTC().Format(time.RFC3339), pair.Leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	return pair, nil
}

// currentPair resolves the current link to the pair file it names, which
// must be one of this store's pair files in Dir: the link's target is a
// bare name, never a path (the store only ever writes such links). A
// regular file in the link's place is read as it is.
func (s *Store) currentPair() (string, error) {
	fi, err := os.Lstat(s.CurrentPath())
	if err != nil {
		return "", err
	}
	if fi.Mode()&fs.ModeSymlink == 0 {
		return s.CurrentPath(), nil
	}
	target, err := os.Readlink(s.CurrentPath())
	if err != nil {
		return "", err
	}
	if target != filepath.Base(target) || !strings.HasPrefix(target, s.Prefix+"-") || !strings.HasSuffix(target, ".pem") || target == filepath.Base(s.CurrentPath()) {
		return "", fmt.Errorf("%s points to %q, not to a pair file of this directory: refusing to read it", s.CurrentPath(), target)
	}
	return filepath.Join(s.Dir, target), nil
}

// parsePair reads certificate blocks followed by one PKCS#8 key block.
func parsePair(data []byte) (*tls.Certificate, error) {
	blocks, err := strictpem.Decode(data, 17)
	if err != nil {
		return nil, err
	}
	if len(blocks) < 2 || blocks[len(blocks)-1].Type != "PRIVATE KEY" {
		return nil, errors.New("must hold the certificate chain and then one PRIVATE KEY block")
	}
	pair := &tls.Certificate{}
	for _, b := range blocks[:len(blocks)-1] {
		if b.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("unexpected %q block before the key", b.Type)
		}
		pair.Certificate = append(pair.Certificate, b.Bytes)
	}
	if pair.Leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
		return nil, errors.New("the certificate does not parse")
	}
	key, err := x509.ParsePKCS8PrivateKey(blocks[len(blocks)-1].Bytes)
	if err != nil {
		return nil, errors.New("the private key does not parse")
	}
	signer, ok := key.(crypto.Signer)
	if !ok || !signing.PublicKeysEqual(signer.Public(), pair.Leaf.PublicKey) {
		return nil, errors.New("the private key is not the certificate's")
	}
	pair.PrivateKey = signer
	return pair, nil
}

// Update stores a new pair and makes it current: the pair file is written
// and synced first, then the symlink is replaced by a rename, so a crash at
// any point leaves either the old current pair or the new one.
func (s *Store) Update(certPEM []byte, key crypto.Signer) (string, error) {
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return "", fmt.Errorf("encoding the private key: %w", err)
	}
	data := append(append([]byte(nil), certPEM...), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})...)
	if _, err := parsePair(data); err != nil {
		return "", fmt.Errorf("refusing to store the pair: %w", err)
	}
	if _, err := PrepareDir(s.Dir); err != nil {
		return "", err
	}
	name := fmt.Sprintf("%s-%s.pem", s.Prefix, s.now().UTC().Format("2006-01-02-15-04-05.000000000"))
	path := filepath.Join(s.Dir, name)
	if err := writeFileSynced(path, data); err != nil {
		return "", err
	}
	s.removeStaleLinks()
	// The new link gets a fresh random name: os.Symlink fails on a name
	// that exists rather than following it, and no name is guessable.
	var link string
	for attempt := 0; ; attempt++ {
		link = filepath.Join(s.Dir, fmt.Sprintf(".%s-current.pem.%s.tmp", s.Prefix, rand.Text()))
		err := os.Symlink(name, link)
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrExist) || attempt == 2 {
			return "", fmt.Errorf("linking the new pair: %w", err)
		}
	}
	reached(StepSwap)
	// rename(2) replaces the current link itself, never what it points to.
	if err := os.Rename(link, s.CurrentPath()); err != nil {
		_ = os.Remove(link)
		return "", fmt.Errorf("making the new pair current: %w", err)
	}
	return path, syncDir(s.Dir)
}

// removeStaleLinks removes the links a crash during a swap left behind
// (Remove removes a link, never what it points to).
func (s *Store) removeStaleLinks() {
	stale, _ := filepath.Glob(filepath.Join(s.Dir, "."+s.Prefix+"-current.pem.*.tmp"))
	for _, link := range append(stale, s.CurrentPath()+".tmp") {
		_ = os.Remove(link)
	}
}

// PendingKey returns the key that waits for a certificate, making (and
// storing, mode 0600) an ECDSA P-256 key when there is none, so that a
// restarted agent asks for the same key again. A pending key file that is
// a link, not a regular file, or readable by others is never used: a new
// key replaces it.
func (s *Store) PendingKey() (crypto.Signer, error) {
	if _, err := PrepareDir(s.Dir); err != nil {
		return nil, err
	}
	data, err := readPrivate(s.pendingKeyPath())
	if err == nil {
		key, perr := signing.ParsePrivateKeyPEM(data)
		if perr == nil {
			return key, nil
		}
		// A torn or foreign file: a new key costs only a new request.
	} else if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, errNotPrivate) {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	if err := writeFileSynced(s.pendingKeyPath(), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})); err != nil {
		return nil, err
	}
	return key, syncDir(s.Dir)
}

// DropPendingKey forgets the pending key once its certificate is stored.
func (s *Store) DropPendingKey() error {
	if err := CheckDir(s.Dir); err != nil {
		return err
	}
	err := os.Remove(s.pendingKeyPath())
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// errNotPrivate marks a file in the directory that is not a regular file
// only its owner may read.
var errNotPrivate = errors.New("not a private regular file")

// readPrivate reads a file of the directory without following a link in
// its place (O_NOFOLLOW), and only if it is a regular file that its group
// and others can neither read nor write: a file anyone else could have
// read is a key anyone else may know.
func readPrivate(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if errors.Is(err, syscall.ELOOP) {
		return nil, fmt.Errorf("%s is a symbolic link: refusing to follow it: %w", path, errNotPrivate)
	}
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file: %w", path, errNotPrivate)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("%s has mode %04o: its group or others may read or write it, refusing to use it (it must be 0600): %w", path, perm, errNotPrivate)
	}
	return readAllCapped(f, path)
}

// readAllCapped reads f (opened from path) whole, refusing more than
// maxPairBytes before holding it all.
func readAllCapped(f *os.File, path string) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(f, maxPairBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxPairBytes {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, maxPairBytes)
	}
	return data, nil
}

// writeFileSynced writes path (mode 0600) through a temporary file that
// os.CreateTemp makes with O_EXCL under a random name in the same
// directory (so no planted link is ever followed), synced, then renamed
// over path (rename replaces a link at path, never what it points to).
func writeFileSynced(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.partial")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	tmp := f.Name()
	defer func() { _ = os.Remove(tmp) }() // gone already after the rename
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(0o600)
	}
	if err == nil {
		err = f.Sync()
	}
	if closeErr := f.Close(); err == nil {
		err = closeErr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// PrepareDir makes dir, mode 0700 (and its missing parents, 0700 too), when
// it does not exist, reporting that it did; an existing dir must pass
// CheckDir.
func PrepareDir(dir string) (created bool, err error) {
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return false, fmt.Errorf("creating the certificate directory %s: %w", dir, err)
		}
		// MkdirAll's mode is filtered by the umask; 0700 is what is wanted.
		if err := os.Chmod(dir, 0o700); err != nil {
			return false, err
		}
		created = true
	}
	return created, CheckDir(dir)
}

// CheckDir refuses a certificate directory that anyone but the agent's user
// could write: one owned by another user, or writable by its group or by
// others (sticky or not). Whoever can write it can plant links and files
// where the agent writes and reads its keys. The directory's parents are
// not checked: a parent others may write lets them replace dir itself.
func CheckDir(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("the certificate directory: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("the certificate directory %s is not a directory", dir)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("the certificate directory %s is owned by uid %d, not by uid %d that rekey-agent runs as: its owner could replace the agent's key; chown it or use another directory", dir, st.Uid, os.Geteuid())
	}
	if perm := fi.Mode().Perm(); perm&0o022 != 0 {
		return fmt.Errorf("the certificate directory %s has mode %04o: it is writable by its group or by others, who could plant links where the agent writes its key; chmod go-w it (0700 is best)", dir, fi.Mode()&(fs.ModePerm|fs.ModeSticky))
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer func() { _ = d.Close() }()
	return d.Sync()
}

// earlyPath is where `run` notes the early renewal point of the current
// certificate, for `exec-credential`.
func (s *Store) earlyPath() string { return filepath.Join(s.Dir, s.Prefix+"-renew-at") }

// SetEarlyRenewal notes that leaf is renewed at at because its CA rotates
// (a zero at removes the note). `exec-credential` gives client-go that
// point as the credential's expiration, so that the kubelet takes the
// renewed certificate as soon as `run` has it, not at the deadline only:
// once the rotation completes the old CA is no longer trusted.
func (s *Store) SetEarlyRenewal(leaf *x509.Certificate, at time.Time) error {
	if at.IsZero() {
		if err := os.Remove(s.earlyPath()); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
	return writeFileSynced(s.earlyPath(), []byte(at.UTC().Format(time.RFC3339Nano)+" "+signing.Fingerprint(leaf)+"\n"))
}

// EarlyRenewal is the point SetEarlyRenewal noted for leaf; zero when there
// is none, or the note is for another certificate (one renewed since).
func (s *Store) EarlyRenewal(leaf *x509.Certificate) time.Time {
	data, err := readPrivate(s.earlyPath())
	if err != nil {
		return time.Time{}
	}
	at, fp, ok := strings.Cut(strings.TrimSpace(string(data)), " ")
	if !ok || fp != signing.Fingerprint(leaf) {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339Nano, at)
	if err != nil {
		return time.Time{}
	}
	return t
}
