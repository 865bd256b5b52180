package standalone

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// UserKubeconfig returns a kubeconfig for a standalone server whose data
// directory is dataDir, authenticated as user in groups with a new client
// certificate from the standalone client CA (valid for a year). The server
// and its CA are the admin kubeconfig's unless server is set. It reads the
// CA's key, so only who can read dataDir can call it, as only they could
// read the admin kubeconfig.
func UserKubeconfig(dataDir, server, user string, groups []string) ([]byte, error) {
	if user == "" {
		return nil, errors.New("a user name is required (--user)")
	}
	if slices.Contains(groups, "") {
		return nil, errors.New("a group name must not be empty (--group)")
	}
	adminPath := filepath.Join(dataDir, AdminKubeconfigFile)
	admin, err := clientcmd.LoadFromFile(adminPath)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%s does not exist: start the server with --standalone --data-dir %s first (make run)", adminPath, dataDir)
		}
		return nil, fmt.Errorf("reading %s: %w", adminPath, err)
	}
	var caPEM []byte
	if c, ok := admin.Contexts[admin.CurrentContext]; ok {
		if cluster, ok := admin.Clusters[c.Cluster]; ok {
			caPEM = cluster.CertificateAuthorityData
			if server == "" {
				server = cluster.Server
			}
		}
	}
	if server == "" || len(caPEM) == 0 {
		return nil, fmt.Errorf("%s names no server and CA of its current context", adminPath)
	}
	p := PKI{Dir: filepath.Join(dataDir, "pki")}
	certPEM, keyPEM, err := p.IssueClientCertificate(user, groups)
	if err != nil {
		return nil, fmt.Errorf("issuing a client certificate with %s: %w", p.Path(ClientCAFile), err)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["rekey"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificateData: certPEM, ClientKeyData: keyPEM}
	cfg.Contexts["rekey"] = &clientcmdapi.Context{Cluster: "rekey", AuthInfo: user}
	cfg.CurrentContext = "rekey"
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		return nil, fmt.Errorf("encoding kubeconfig: %w", err)
	}
	return data, nil
}
