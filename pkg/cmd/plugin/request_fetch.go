package plugin

import (
	"context"
	"crypto"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	"rekey.io/rekey/pkg/csrwait"
	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
)

// errWaitTimedOut is the cause of a wait that ran out of --wait.
var errWaitTimedOut = errors.New("--wait ran out")

// waitForCertificate waits (pkg/csrwait, on a watch of the request) at
// most timeout for csr's certificate. A refusal names the condition with
// its reason and message; a timeout says what the request still waits
// for.
func waitForCertificate(ctx context.Context, client clientset.Interface, csr *certv1alpha1.CertificateSigningRequest, timeout time.Duration) ([]byte, error) {
	wctx, cancel := context.WithTimeoutCause(ctx, timeout, errWaitTimedOut)
	defer cancel()
	chain, err := csrwait.WaitForCertificate(wctx, client, csr.Name, csr.UID)
	if err == nil {
		return chain, nil
	}
	var refused *csrwait.RefusedError
	if errors.As(err, &refused) {
		return nil, refusal(refused)
	}
	if errors.Is(err, errWaitTimedOut) {
		state := "it has no certificate"
		if current, getErr := client.CertificatesV1alpha1().CertificateSigningRequests().Get(ctx, csr.Name, metav1.GetOptions{}); getErr == nil {
			state = pendingState(current)
		}
		return nil, fmt.Errorf("timed out after %s waiting for the certificate of certificatesigningrequest %q: %s", timeout, csr.Name, state)
	}
	return nil, fmt.Errorf("waiting for the certificate of certificatesigningrequest %q: %w", csr.Name, err)
}

// decidedError is csrwait.Decided's error as the plugin says it.
func decidedError(err error) error {
	var refused *csrwait.RefusedError
	if errors.As(err, &refused) {
		return refusal(refused)
	}
	return err
}

// refusal is a request that ended without a certificate, with the
// condition's reason and message: the rule it broke.
func refusal(r *csrwait.RefusedError) error {
	what := r.Condition
	if r.Condition == string(certv1alpha1.CertificateAttested) {
		what = "refused at attestation (Attested=False)"
	}
	return fmt.Errorf("certificatesigningrequest %q was %s: reason %s: %s", r.Request, what, r.Reason, r.Message)
}

// writeKubeconfig writes a kubeconfig (mode 0600, never over an existing
// file) whose only user is the key and certificate, against the server
// and CA of the connection the plugin uses (the current context, or what
// --context and --server chose).
func writeKubeconfig(deps requestDeps, file, name string, chain []byte, key crypto.Signer) error {
	cfg, err := deps.restConfig()
	if err != nil {
		return fmt.Errorf("--kubeconfig-out: reading the current connection: %w", err)
	}
	keyPEM, err := marshalPrivateKeyPEM(key)
	if err != nil {
		return fmt.Errorf("--kubeconfig-out: encoding the key: %w", err)
	}
	cluster := clientcmdapi.NewCluster()
	cluster.Server = cfg.Host
	if cfg.APIPath != "" && cfg.APIPath != "/api" && !strings.HasSuffix(cfg.Host, cfg.APIPath) {
		cluster.Server = strings.TrimSuffix(cfg.Host, "/") + cfg.APIPath
	}
	cluster.TLSServerName = cfg.ServerName
	cluster.InsecureSkipTLSVerify = cfg.Insecure
	cluster.CertificateAuthorityData = cfg.CAData
	if len(cluster.CertificateAuthorityData) == 0 && cfg.CAFile != "" {
		// Embedded, so that the file works wherever it is copied.
		if cluster.CertificateAuthorityData, err = os.ReadFile(cfg.CAFile); err != nil {
			return fmt.Errorf("--kubeconfig-out: reading the CA of the current context: %w", err)
		}
	}
	user := clientcmdapi.NewAuthInfo()
	user.ClientCertificateData = chain
	user.ClientKeyData = keyPEM
	kctx := clientcmdapi.NewContext()
	kctx.Cluster, kctx.AuthInfo = name, name
	out := clientcmdapi.NewConfig()
	out.Clusters[name] = cluster
	out.AuthInfos[name] = user
	out.Contexts[name] = kctx
	out.CurrentContext = name
	data, err := clientcmd.Write(*out)
	if err != nil {
		return fmt.Errorf("--kubeconfig-out: %w", err)
	}
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("--kubeconfig-out: %w", err)
	}
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		return fmt.Errorf("--kubeconfig-out %s: %w", file, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("--kubeconfig-out %s: %w", file, err)
	}
	return nil
}

// dryRunRequest creates csr with dryRun=All: the server runs the signer's
// policy on it, as the requester, and answers with the decision as a
// warning (certv1alpha1.DryRunWarningPrefix). A refusal, or no decision,
// exits non-zero.
func dryRunRequest(ctx context.Context, deps requestDeps, csr *certv1alpha1.CertificateSigningRequest, streams genericiooptions.IOStreams) error {
	warnings := &warningList{}
	client, err := deps.newWarningClient(warnings)
	if err != nil {
		return err
	}
	created, err := client.CertificatesV1alpha1().CertificateSigningRequests().Create(ctx, csr,
		metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldManager: "kubectl-rekey"})
	if err != nil {
		// Validation and admission run in a dry run too: their refusal
		// is what the real create would get.
		return fmt.Errorf("the server refuses certificatesigningrequest %q (dry run): %s", csr.Name, statusMessage(err))
	}
	fmt.Fprintf(streams.Out, "certificatesigningrequest.certificates.rekey.io/%s (dry run: nothing was created)\n", csr.Name)
	fmt.Fprintf(streams.Out, "  requester: %s", created.Spec.Username)
	if len(created.Spec.Groups) > 0 {
		fmt.Fprintf(streams.Out, " (groups %s)", strings.Join(created.Spec.Groups, ", "))
	}
	fmt.Fprintln(streams.Out)
	decision := ""
	for _, w := range warnings.all() {
		if rest, ok := strings.CutPrefix(w, certv1alpha1.DryRunWarningPrefix); ok && decision == "" {
			decision = rest
			continue
		}
		fmt.Fprintf(streams.ErrOut, "Warning: %s\n", w)
	}
	if decision == "" {
		return errors.New("the server gave no decision for the dry run: it is not a rekey server that runs its signers' policies on a dry run (older than this plugin?)")
	}
	signer, fields, ok := strings.Cut(decision, certv1alpha1.DryRunWouldIssue)
	if !ok {
		fmt.Fprintf(streams.ErrOut, "error: %s\n", decision)
		return errAlreadyReported
	}
	fmt.Fprintf(streams.Out, "  %s would issue:\n", signer)
	for _, f := range splitFields(fields) {
		fmt.Fprintf(streams.Out, "    %s\n", f)
	}
	return nil
}

// splitFields splits a dry run's "would issue" fields on the "; " between
// them, not on one inside parentheses: a field's parenthesised clause
// (older servers wrote "(capped by ...; asked ...)") stays on its line.
func splitFields(s string) []string {
	var fields []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '(':
			depth++
		case ')':
			if depth > 0 {
				depth--
			}
		case ';':
			if depth == 0 && strings.HasPrefix(s[i:], "; ") {
				fields = append(fields, s[start:i])
				start = i + 2
				i++
			}
		}
	}
	return append(fields, s[start:])
}
