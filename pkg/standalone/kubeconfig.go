package standalone

import (
	"fmt"
	"os"

	"k8s.io/client-go/tools/clientcmd"

	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"rekey.io/rekey/pkg/pki"
)

// AdminKubeconfigFile is the name of the admin kubeconfig in the data directory.
const AdminKubeconfigFile = "admin.kubeconfig"

// WriteKubeconfig writes a kubeconfig for server that trusts the serving CA
// and authenticates with the given client certificate and key.
func (p PKI) WriteKubeconfig(path, server, user string, certPEM, keyPEM []byte) error {
	caPEM, err := os.ReadFile(p.Path(ServingCAFile))
	if err != nil {
		return fmt.Errorf("reading serving CA: %w", err)
	}
	return WriteKubeconfig(path, server, caPEM, user, certPEM, keyPEM)
}

// WriteKubeconfig writes (mode 0600) a kubeconfig for server that trusts
// caPEM and authenticates as user with a client certificate and key.
func WriteKubeconfig(path, server string, caPEM []byte, user string, certPEM, keyPEM []byte) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["rekey"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificateData: certPEM, ClientKeyData: keyPEM}
	cfg.Contexts["rekey"] = &clientcmdapi.Context{Cluster: "rekey", AuthInfo: user}
	cfg.CurrentContext = "rekey"
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		return fmt.Errorf("encoding kubeconfig: %w", err)
	}
	return pki.WriteFileAtomic(path, data, 0o600)
}

// WriteAdminKubeconfig writes the kubeconfig of the system:masters admin.
func (p PKI) WriteAdminKubeconfig(path, server string) error {
	certPEM, err := os.ReadFile(p.Path(adminCertFile))
	if err != nil {
		return fmt.Errorf("reading admin certificate: %w", err)
	}
	keyPEM, err := os.ReadFile(p.Path(adminKeyFile))
	if err != nil {
		return fmt.Errorf("reading admin key: %w", err)
	}
	return p.WriteKubeconfig(path, server, AdminUser, certPEM, keyPEM)
}
