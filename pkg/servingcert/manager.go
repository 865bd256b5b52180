package servingcert

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	"rekey.io/rekey/pkg/authority"
	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
	informers "rekey.io/rekey/pkg/generated/informers/externalversions"
	"rekey.io/rekey/pkg/issuance"
	"rekey.io/rekey/pkg/signing"
	"rekey.io/rekey/pkg/signing/cabinding"
)

// Config says which CA serves rekey and for which names.
type Config struct {
	// CAName is the CertificateAuthority rekey creates (Etcd key store)
	// and issues its serving certificate from.
	CAName string
	// Hosts are the DNS names and IP addresses of the certificate; the
	// aggregator checks <service>.<namespace>.svc.
	Hosts []string
	// APIServices get the CA's trust bundle as caBundle (with a host
	// cluster only).
	APIServices []string
	// Validity of each serving certificate; renewed at two thirds.
	Validity time.Duration
	// Provider is what the TLS listener serves.
	Provider *Provider
}

var apiServices = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}

// Manager keeps one replica's serving certificate issued by the CA and the
// APIServices' caBundle equal to the CA's bundle. It runs on every replica.
type Manager struct {
	cfg      Config
	replica  string
	stores   *authority.KeyStores
	bindings cabinding.Store
	records  interface {
		Record(ctx context.Context, rec issuance.Record) error
	}
	kube  dynamic.Interface
	clock clock.PassiveClock

	authorities *authority.Authorities
}

// NewManager returns a manager; kube is nil without a host cluster.
func NewManager(cfg Config, replica string, stores *authority.KeyStores, bindings cabinding.Store, records *issuance.Recorder, kube dynamic.Interface) *Manager {
	if cfg.Validity == 0 {
		cfg.Validity = 30 * 24 * time.Hour
	}
	return &Manager{cfg: cfg, replica: replica, stores: stores, bindings: bindings, records: records, kube: kube, clock: clock.RealClock{}}
}

// Run creates the CA if it is missing, then keeps the certificate and the
// APIServices current until ctx is done.
func (m *Manager) Run(ctx context.Context, restConfig *rest.Config) {
	logger := klog.FromContext(ctx).WithValues("servingCA", m.cfg.CAName)
	ctx = klog.NewContext(ctx, logger)
	client, err := clientset.NewForConfig(restConfig)
	if err != nil {
		logger.Error(err, "Creating the serving CA client")
		return
	}
	factory := informers.NewSharedInformerFactory(client, 10*time.Minute)
	informer := factory.Rotation().V1alpha1().CertificateAuthorities()
	m.authorities = authority.NewAuthorities(informer.Lister(), m.stores, m.bindings)
	changed := make(chan struct{}, 1)
	poke := func(any) {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	_, _ = informer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: poke, UpdateFunc: func(_, o any) { poke(o) }})
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	factory.WaitForCacheSync(ctx.Done())

	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	for {
		if err := m.ensureCA(ctx, client); err != nil {
			logger.Error(err, "Creating the serving CertificateAuthority")
		} else if err := m.sync(ctx, informer.Lister()); err != nil {
			logger.Error(err, "Keeping the serving certificate current")
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-tick.C:
		}
	}
}

func (m *Manager) ensureCA(ctx context.Context, client clientset.Interface) error {
	_, err := client.RotationV1alpha1().CertificateAuthorities().Create(ctx, &rotationv1alpha1.CertificateAuthority{
		ObjectMeta: metav1.ObjectMeta{Name: m.cfg.CAName, Labels: map[string]string{"rekey.io/built-in": "true"}},
		Spec: rotationv1alpha1.CertificateAuthoritySpec{CommonName: "rekey-apiserver serving CA", KeyAlgorithm: rotationv1alpha1.ECDSAP256,
			Validity: metav1.Duration{Duration: rotationv1alpha1.DefaultValidity}, KeyStore: rotationv1alpha1.KeyStore{Type: rotationv1alpha1.KeyStoreEtcd}},
	}, metav1.CreateOptions{FieldManager: "rekey-serving-ca"})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// lister is what sync reads the CA from.
type lister interface {
	Get(name string) (*rotationv1alpha1.CertificateAuthority, error)
}

// sync publishes the bundle to the APIServices, then renews the serving
// certificate when the CA changed or it is two-thirds through its life.
// After a rotation starts, the new certificate is served only once every
// APIService trusts the new CA, so the aggregator never sees a
// certificate it cannot verify.
func (m *Manager) sync(ctx context.Context, l lister) error {
	ca, err := l.Get(m.cfg.CAName)
	if err != nil || ca.Status.Current == nil || ca.Status.TrustBundle == "" {
		return nil // the CA controller has not made the key yet
	}
	trusted := true
	if m.kube != nil {
		if trusted, err = m.syncAPIServices(ctx, ca); err != nil {
			return err
		}
	}
	if !m.due(ca) || !trusted {
		return nil
	}
	return m.issue(ctx, ca)
}

func (m *Manager) due(ca *rotationv1alpha1.CertificateAuthority) bool {
	cert := m.cfg.Provider.Certificate()
	if cert == nil {
		return true
	}
	current, err := authority.ParseCertificatePEM(ca.Status.Current.Certificate)
	if err != nil {
		return false
	}
	if cert.CheckSignatureFrom(current) != nil {
		return true // the start-up certificate, or one of the previous CA
	}
	life := cert.NotAfter.Sub(cert.NotBefore)
	return m.clock.Now().After(cert.NotBefore.Add(life * 2 / 3))
}

// syncAPIServices sets each APIService's caBundle to the CA's bundle and
// reports whether all of them now trust the current CA.
func (m *Manager) syncAPIServices(ctx context.Context, ca *rotationv1alpha1.CertificateAuthority) (bool, error) {
	want := []byte(ca.Status.TrustBundle)
	for _, name := range m.cfg.APIServices {
		obj, err := m.kube.Resource(apiServices).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, fmt.Errorf("reading APIService %s: %w", name, err)
		}
		encoded, _, err := unstructured.NestedString(obj.Object, "spec", "caBundle")
		if err != nil {
			return false, fmt.Errorf("APIService %s: %w", name, err)
		}
		have, _ := base64.StdEncoding.DecodeString(encoded)
		if bytes.Equal(have, want) {
			continue
		}
		patch, err := json.Marshal(map[string]any{"spec": map[string]any{"caBundle": base64.StdEncoding.EncodeToString(want)}})
		if err != nil {
			return false, err
		}
		if _, err := m.kube.Resource(apiServices).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "rekey-serving-ca"}); err != nil {
			return false, fmt.Errorf("updating the caBundle of APIService %s: %w", name, err)
		}
		klog.FromContext(ctx).Info("APIService caBundle updated to the serving CA's bundle", "apiService", name)
	}
	return true, nil
}

// issue makes a key in memory and a serving certificate for it, records
// the issuance (so a rotation knows whether this replica renewed), and
// serves it.
func (m *Manager) issue(ctx context.Context, ca *rotationv1alpha1.CertificateAuthority) error {
	auth, err := m.authorities.Get(ctx, ca.Name)
	if err != nil {
		return err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.CertificateRequest{Subject: pkix.Name{CommonName: m.cfg.Hosts[0]}}
	for _, h := range m.cfg.Hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		return err
	}
	req, err := x509.ParseCertificateRequest(der)
	if err != nil {
		return err
	}
	certPEM, cert, err := signing.Issue(signing.Issuance{Request: req, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, Duration: m.cfg.Validity, Now: m.clock.Now()}, auth.Cert, auth.Signer)
	if err != nil {
		return err
	}
	if err := m.records.Record(ctx, issuance.Record{
		Serial: fmt.Sprintf("%x", cert.SerialNumber), CSRName: "serving:" + m.replica, Requester: "rekey-apiserver/" + m.replica,
		Subject: cert.Subject.String(), CAName: ca.Name, CAKeyID: auth.KeyID, NotBefore: cert.NotBefore, NotAfter: cert.NotAfter,
	}); err != nil {
		return err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	m.cfg.Provider.Set(certPEM, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}))
	klog.FromContext(ctx).Info("Serving certificate issued by the serving CA", "fingerprint", signing.Fingerprint(cert), "caKeyID", auth.KeyID, "notAfter", cert.NotAfter)
	return nil
}
