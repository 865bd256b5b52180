package agent

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientauthv1 "k8s.io/client-go/pkg/apis/clientauthentication/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"rekey.io/rekey/pkg/pki"
)

// ExecCredential is what `rekey-agent exec-credential` prints for
// client-go's exec credential plugin mechanism: the current pair, and as
// expiration its renewal deadline (with renewBefore as `run` has it), or
// early, the point `run` renews it at because its CA rotates (Store's
// EarlyRenewal; zero for none), whichever comes first, so that client-go
// asks again by the time `run` has renewed. Past that (a renewal late,
// failing, or under way) it asks again within ten seconds, never after the
// certificate expires.
//
// recheck, when above 0, caps the expiration at now+recheck: client-go
// keeps a credential until it expires and runs the plugin earlier only
// after a 401, so a client (the kubelet) that fetched its credential
// before a CA rotation would otherwise hold the old certificate past the
// renewal `run` makes at the rotation's renewal point, until the old CA is
// dropped (Complete) and a request fails. With the cap it takes the
// renewed certificate within recheck.
func ExecCredential(pair *tls.Certificate, now time.Time, renewBefore time.Duration, early time.Time, recheck time.Duration) ([]byte, error) {
	certPEM, keyPEM, err := EncodePair(pair)
	if err != nil {
		return nil, err
	}
	expires := renewalDeadline(pair.Leaf, nil, renewBefore)
	if !early.IsZero() && early.Before(expires) {
		expires = early
	}
	if recheck > 0 && now.Add(recheck).Before(expires) {
		expires = now.Add(recheck)
	}
	if !now.Before(expires) {
		expires = now.Add(10 * time.Second)
		if pair.Leaf.NotAfter.Before(expires) {
			expires = pair.Leaf.NotAfter
		}
	}
	stamp := metav1.NewTime(expires.UTC().Truncate(time.Second))
	return json.Marshal(&clientauthv1.ExecCredential{
		TypeMeta: metav1.TypeMeta{APIVersion: clientauthv1.SchemeGroupVersion.String(), Kind: "ExecCredential"},
		Status: &clientauthv1.ExecCredentialStatus{
			ExpirationTimestamp:   &stamp,
			ClientCertificateData: string(certPEM),
			ClientKeyData:         string(keyPEM),
		},
	})
}

// WriteNodeKubeconfig writes (mode 0600) the node's kubeconfig: the
// server and CA of the bootstrap kubeconfig, and as credentials the
// store's current pair file, certificate and key both, so that the file
// stays right across renewals.
func WriteNodeKubeconfig(path string, bootstrap *clientcmdapi.Config, store *Store) error {
	ctx, ok := bootstrap.Contexts[bootstrap.CurrentContext]
	if !ok {
		return fmt.Errorf("the bootstrap kubeconfig has no current context")
	}
	cluster, ok := bootstrap.Clusters[ctx.Cluster]
	if !ok {
		return fmt.Errorf("the bootstrap kubeconfig has no cluster %q", ctx.Cluster)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["default"] = cluster.DeepCopy()
	cfg.AuthInfos["default"] = &clientcmdapi.AuthInfo{ClientCertificate: store.CurrentPath(), ClientKey: store.CurrentPath()}
	cfg.Contexts["default"] = &clientcmdapi.Context{Cluster: "default", AuthInfo: "default"}
	cfg.CurrentContext = "default"
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		return fmt.Errorf("encoding the node kubeconfig: %w", err)
	}
	return pki.WriteFileAtomic(path, data, 0o600)
}

// EncodePair returns a pair's certificate chain and PKCS#8 key as PEM.
func EncodePair(pair *tls.Certificate) (certPEM, keyPEM []byte, err error) {
	for _, der := range pair.Certificate {
		certPEM = append(certPEM, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})...)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(pair.PrivateKey)
	if err != nil {
		return nil, nil, fmt.Errorf("encoding the private key: %w", err)
	}
	return certPEM, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), nil
}
