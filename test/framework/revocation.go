package framework

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Revocation webhook failure policies (AuthorizationConfiguration's
// failurePolicy): what kube-apiserver decides when rekey's webhook cannot
// answer.
const (
	RevocationFailOpen   = "NoOpinion"
	RevocationFailClosed = "Deny"
)

// RevocationWebhookPath is where rekey serves its authorization webhook.
const RevocationWebhookPath = "/revocation/authorize"

// RevocationAuthorizationConfiguration is the AuthorizationConfiguration
// docs/revocation.md gives (TestRevocationAuthorizationConfigurationDoc
// keeps the two the same): rekey's revocation webhook first, asked only
// for requests made with a client certificate (an X509SHA256 credential-id),
// nothing cached (a NoOpinion is an "unauthorized" decision: cached, it
// would let a certificate revoked meanwhile through for the TTL), then Node
// and RBAC as --authorization-mode=Node,RBAC would. kubeConfigFile reaches
// the webhook; failurePolicy is RevocationFailOpen or RevocationFailClosed.
func RevocationAuthorizationConfiguration(kubeConfigFile, failurePolicy string) string {
	return strings.NewReplacer("$(KUBECONFIG)", kubeConfigFile, "$(FAILURE_POLICY)", failurePolicy).Replace(revocationAuthorizationTemplate)
}

const revocationAuthorizationTemplate = `apiVersion: apiserver.config.k8s.io/v1
kind: AuthorizationConfiguration
authorizers:
- type: Webhook
  name: rekey-revocation
  webhook:
    timeout: 3s
    subjectAccessReviewVersion: v1
    matchConditionSubjectAccessReviewVersion: v1
    failurePolicy: $(FAILURE_POLICY)
    # Never cached: each request with a certificate is asked again, so a
    # revocation holds from the next request on.
    cacheAuthorizedRequests: false
    cacheUnauthorizedRequests: false
    # Unused while caching is off (left out, v1 defaults them to 5m and
    # 30s); 1s bounds a stale answer if caching is ever turned on.
    authorizedTTL: 1s
    unauthorizedTTL: 1s
    connectionInfo:
      type: KubeConfigFile
      kubeConfigFile: $(KUBECONFIG)
    matchConditions:
    # Only requests made with a client certificate: kube-apiserver puts
    # X509SHA256=<hex SHA-256 of the leaf> in the user's credential-id.
    - expression: >-
        'authentication.kubernetes.io/credential-id' in request.extra &&
        request.extra['authentication.kubernetes.io/credential-id'].exists(id, id.startsWith('X509SHA256='))
- type: Node
  name: node
- type: RBAC
  name: rbac
`

// writeRevocationAuthorization writes the webhook's kubeconfig (rekey on
// loopback at its port, trusted by the harness's serving CA, which rekey
// serves with from its first start: so kube-apiserver, started first, can
// be given it) and one AuthorizationConfiguration per failure policy.
func (c *Cluster) writeRevocationAuthorization() error {
	dir := filepath.Join(c.Dir, "authz")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	kubeconfig := clientcmdapi.NewConfig()
	kubeconfig.Clusters["rekey"] = &clientcmdapi.Cluster{
		Server:                   fmt.Sprintf("https://127.0.0.1:%d%s", c.RekeyPort, RevocationWebhookPath),
		CertificateAuthorityData: c.RekeyServingCA.CertPEM(),
	}
	// The webhook takes no credentials.
	kubeconfig.AuthInfos["kube-apiserver"] = &clientcmdapi.AuthInfo{}
	kubeconfig.Contexts["rekey"] = &clientcmdapi.Context{Cluster: "rekey", AuthInfo: "kube-apiserver"}
	kubeconfig.CurrentContext = "rekey"
	kubeconfigPath := filepath.Join(dir, "rekey-revocation-webhook.kubeconfig")
	if err := clientcmd.WriteToFile(*kubeconfig, kubeconfigPath); err != nil {
		return err
	}
	for _, policy := range []string{RevocationFailOpen, RevocationFailClosed} {
		if err := os.WriteFile(c.RevocationAuthorizationConfigPath(policy), []byte(RevocationAuthorizationConfiguration(kubeconfigPath, policy)), 0o600); err != nil {
			return err
		}
	}
	return nil
}

// RevocationAuthorizationConfigPath is the AuthorizationConfiguration file
// with failurePolicy policy, written when the cluster was started with
// RevocationWebhookAuthorizer: restart kube-apiserver with
// "--authorization-config="+path to change the policy.
func (c *Cluster) RevocationAuthorizationConfigPath(policy string) string {
	return filepath.Join(c.Dir, "authz", "authorization-"+strings.ToLower(policy)+".yaml")
}
