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
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	"rekey.io/rekey/pkg/authority"
	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
	rotationinformers "rekey.io/rekey/pkg/generated/informers/externalversions/rotation/v1alpha1"
	"rekey.io/rekey/pkg/issuance"
	"rekey.io/rekey/pkg/runner"
	"rekey.io/rekey/pkg/signing"
	"rekey.io/rekey/pkg/trustpublish"
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

const (
	// fieldManager writes the serving CA and the APIServices' caBundle.
	fieldManager = "rekey-serving-ca"
	// UserAgent is appended to the default user agent of the manager's
	// clients (rest.AddUserAgent), so that its requests can be told apart
	// in the audit logs of rekey-apiserver and kube-apiserver.
	UserAgent = "serving-ca"
)

// Records is where each issued serving certificate is recorded.
type Records interface {
	Record(ctx context.Context, rec issuance.Record) error
}

// Deps is what a Manager is built from; the caller makes each part.
type Deps struct {
	// Replica names this replica in the issuance records.
	Replica string
	// Authorities is the server's one cache of CA keys (shared with the
	// issuer and the controllers).
	Authorities *authority.Authorities
	// Records records each serving certificate before it is served.
	Records Records
	// CAs is the replica's shared CertificateAuthority informer, started by
	// the caller; Run adds its handler and removes it when it returns.
	CAs rotationinformers.CertificateAuthorityInformer
	// Client reaches rekey, to create the CA when it is missing (give it
	// the user agent UserAgent).
	Client clientset.Interface
	// APIServices reaches the host cluster's APIServices, nil without a
	// host cluster. Run watches only Config.APIServices, one informer per
	// name (field selector metadata.name), and patches their caBundle.
	APIServices dynamic.Interface
	Clock       clock.PassiveClock
	// Published, when set (with APIServices), is told whether every
	// APIService's caBundle holds the CA's bundle: a rotation of the
	// serving CA signs with its new key only once they do.
	Published *trustpublish.Tracker
}

// PublisherName is the name the manager reports under (trustpublish).
const PublisherName = "rekey-serving-ca (APIService caBundle)"

// Manager keeps one replica's serving certificate issued by the CA and the
// APIServices' caBundle equal to the CA's bundle. It runs on every replica,
// on informers: in a steady state it makes no request.
type Manager struct {
	cfg         Config
	replica     string
	authorities *authority.Authorities
	records     Records
	cas         rotationinformers.CertificateAuthorityInformer
	client      clientset.Interface
	kube        dynamic.Interface
	clock       clock.PassiveClock

	// apiServiceInformers watch one APIService each, by name.
	apiServiceInformers map[string]cache.SharedIndexInformer
	queue               workqueue.TypedRateLimitingInterface[string]
	// reporter tells the CA controller what the APIServices trust.
	reporter *trustpublish.Reporter
}

// New returns a manager that has not started.
func New(cfg Config, deps Deps) *Manager {
	if cfg.Validity == 0 {
		cfg.Validity = 30 * 24 * time.Hour
	}
	m := &Manager{
		cfg: cfg, replica: deps.Replica, authorities: deps.Authorities, records: deps.Records, cas: deps.CAs,
		client: deps.Client, kube: deps.APIServices, clock: deps.Clock,
		apiServiceInformers: map[string]cache.SharedIndexInformer{},
		queue:               runner.NewQueue[string]("serving-ca"),
	}
	if m.kube != nil {
		for _, name := range cfg.APIServices {
			selector := fields.OneTermEqualSelector("metadata.name", name).String()
			m.apiServiceInformers[name] = dynamicinformer.NewFilteredDynamicInformer(m.kube, apiServices, "", 0, cache.Indexers{},
				func(o *metav1.ListOptions) { o.FieldSelector = selector }).Informer()
		}
		if deps.Published != nil && len(cfg.APIServices) > 0 {
			m.reporter = deps.Published.Register(PublisherName, func(ca *rotationv1alpha1.CertificateAuthority) bool { return ca.Name == cfg.CAName })
		}
	}
	return m
}

// Run creates the CA if it is missing, then keeps the certificate and the
// APIServices current until ctx is done. The CA informer must be started
// by the caller; the APIService informers are the manager's own.
func (m *Manager) Run(ctx context.Context) {
	logger := klog.FromContext(ctx).WithValues("servingCA", m.cfg.CAName)
	ctx = klog.NewContext(ctx, logger)
	enqueue := func(any) { m.queue.Add(m.cfg.CAName) }
	handler := cache.ResourceEventHandlerFuncs{AddFunc: enqueue, UpdateFunc: func(_, o any) { enqueue(o) }, DeleteFunc: enqueue}
	caInformer := m.cas.Informer()
	reg, err := caInformer.AddEventHandler(cache.FilteringResourceEventHandler{FilterFunc: m.isServingCA, Handler: handler})
	if err != nil {
		logger.Error(err, "Watching the serving CertificateAuthority")
		return
	}
	defer func() { _ = caInformer.RemoveEventHandler(reg) }()
	synced := []cache.InformerSynced{reg.HasSynced}
	var wg sync.WaitGroup
	defer wg.Wait()
	for name, inf := range m.apiServiceInformers {
		r, err := inf.AddEventHandler(handler)
		if err != nil {
			logger.Error(err, "Watching an APIService", "apiService", name)
			return
		}
		synced = append(synced, r.HasSynced)
		wg.Add(1)
		go func() { defer wg.Done(); inf.RunWithContext(ctx) }()
	}
	// The CA may be missing: no event would say so.
	m.queue.Add(m.cfg.CAName)
	runner.Run(ctx, "serving-ca", m.queue, synced, 1, m.sync)
}

func (m *Manager) isServingCA(obj any) bool {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	ca, ok := obj.(*rotationv1alpha1.CertificateAuthority)
	return ok && ca.Name == m.cfg.CAName
}

// sync publishes the bundle to the APIServices, then renews the serving
// certificate when the CA changed or it is two-thirds through its life,
// and asks to be called again at the next two-thirds point. After a
// rotation starts, the new certificate is served only once every
// APIService trusts the new CA, so the aggregator never sees a certificate
// it cannot verify. Everything is read from the informers: the only
// requests are the writes a difference calls for.
func (m *Manager) sync(ctx context.Context, _ string) (time.Duration, error) {
	ca, err := m.cas.Lister().Get(m.cfg.CAName)
	if apierrors.IsNotFound(err) {
		return 0, m.createCA(ctx)
	}
	if err != nil {
		return 0, err
	}
	if ca.Spec.Purpose == rotationv1alpha1.PurposeServiceAccountTokens {
		// Its key signs tokens only: neither serve a certificate it signed
		// nor make APIServices trust it.
		return 0, fmt.Errorf("serving CertificateAuthority %q has purpose ServiceAccountTokens: name a CertificateAuthority with purpose Certificates", ca.Name)
	}
	if ca.Status.Current == nil || ca.Status.TrustBundle == "" {
		return 0, nil // the CA controller has not made the key yet; its update requeues
	}
	trusted := true
	if m.kube != nil {
		trusted, err = m.syncAPIServices(ctx, ca)
		if m.reporter != nil {
			switch {
			case err != nil:
				m.reporter.Failed(ca.Name, err)
			case !trusted:
				m.reporter.Failed(ca.Name, fmt.Errorf("waiting for APIServices %s to exist", strings.Join(m.cfg.APIServices, ", ")))
			default:
				m.reporter.Published(ca.Name, ca.Status.TrustBundle)
			}
		}
		if err != nil {
			return 0, err
		}
	}
	renewAt, due, ok := m.renewal(ca)
	if !ok {
		return 0, nil // the published certificate does not parse; wait for the next update
	}
	if !due {
		return renewAt.Sub(m.clock.Now()), nil
	}
	if !trusted {
		return 0, nil // an APIService event requeues
	}
	if err := m.issue(ctx, ca); err != nil {
		return 0, err
	}
	renewAt, _, _ = m.renewal(ca)
	return renewAt.Sub(m.clock.Now()), nil
}

// createCA creates the serving CA, which the lister says is missing.
func (m *Manager) createCA(ctx context.Context) error {
	_, err := m.client.RotationV1alpha1().CertificateAuthorities().Create(ctx, &rotationv1alpha1.CertificateAuthority{
		ObjectMeta: metav1.ObjectMeta{Name: m.cfg.CAName, Labels: map[string]string{"rekey.io/built-in": "true"}},
		Spec: rotationv1alpha1.CertificateAuthoritySpec{CommonName: "rekey-apiserver serving CA", KeyAlgorithm: rotationv1alpha1.ECDSAP256,
			Validity: metav1.Duration{Duration: rotationv1alpha1.DefaultValidity}, KeyStore: rotationv1alpha1.KeyStore{Type: rotationv1alpha1.KeyStoreEtcd}},
	}, metav1.CreateOptions{FieldManager: fieldManager})
	if apierrors.IsAlreadyExists(err) {
		return nil // another replica made it; its add event requeues
	}
	if err != nil {
		return fmt.Errorf("creating the serving CertificateAuthority: %w", err)
	}
	klog.FromContext(ctx).Info("Serving CertificateAuthority created")
	return nil
}

// renewal says when the served certificate is to be renewed and whether
// that is now: at once for none or one the current CA did not sign (the
// start-up certificate, or one of the previous CA), else at two thirds of
// its life. ok is false when the CA's certificate does not parse.
func (m *Manager) renewal(ca *rotationv1alpha1.CertificateAuthority) (renewAt time.Time, due, ok bool) {
	now := m.clock.Now()
	cert := m.cfg.Provider.Certificate()
	if cert == nil {
		return now, true, true
	}
	current, err := authority.ParseCertificatePEM(ca.Status.Current.Certificate)
	if err != nil {
		return time.Time{}, false, false
	}
	if cert.CheckSignatureFrom(current) != nil {
		return now, true, true
	}
	life := cert.NotAfter.Sub(cert.NotBefore)
	renewAt = cert.NotBefore.Add(life * 2 / 3)
	return renewAt, !now.Before(renewAt), true
}

// syncAPIServices sets each APIService's caBundle to the CA's bundle where
// the informer shows it differs, and reports whether all of them now trust
// the current CA (false while one does not exist).
func (m *Manager) syncAPIServices(ctx context.Context, ca *rotationv1alpha1.CertificateAuthority) (bool, error) {
	want := []byte(ca.Status.TrustBundle)
	trusted := true
	for _, name := range m.cfg.APIServices {
		obj, exists, err := m.apiServiceInformers[name].GetStore().GetByKey(name)
		if err != nil {
			return false, fmt.Errorf("reading APIService %s: %w", name, err)
		}
		if !exists {
			klog.FromContext(ctx).Info("APIService does not exist; the serving certificate waits for it", "apiService", name)
			trusted = false
			continue
		}
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return false, fmt.Errorf("APIService %s: unexpected %T in the cache", name, obj)
		}
		encoded, _, err := unstructured.NestedString(u.Object, "spec", "caBundle")
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
		if _, err := m.kube.Resource(apiServices).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: fieldManager}); err != nil {
			return false, fmt.Errorf("updating the caBundle of APIService %s: %w", name, err)
		}
		klog.FromContext(ctx).Info("APIService caBundle updated to the serving CA's bundle", "apiService", name)
	}
	return trusted, nil
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
		SHA256: issuance.SHA256(cert),
	}); err != nil {
		if errors.Is(err, issuance.ErrKeyRetired) {
			// This replica's view of the CA is stale: a completed rotation
			// retired the key it signed with. Nothing is served; the
			// binding is read again for the next attempt, instead of
			// signing with the retired key until the informer catches up.
			m.authorities.Forget(ca.Name)
			klog.FromContext(ctx).Info("Refused to serve a certificate signed by a retired CA key; its record was not written",
				"ca", ca.Name, "keyID", auth.KeyID, "serial", fmt.Sprintf("%x", cert.SerialNumber))
		}
		return fmt.Errorf("recording the serving certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	m.cfg.Provider.Set(certPEM, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}))
	klog.FromContext(ctx).Info("Serving certificate issued by the serving CA", "fingerprint", signing.Fingerprint(cert), "caKeyID", auth.KeyID, "notAfter", cert.NotAfter)
	return nil
}
