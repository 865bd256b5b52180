package plugin

import (
	"context"
	"crypto"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
	"rekey.io/rekey/pkg/strictpem"
)

type renewOptions struct {
	fetchOptions
	name, keyFile, newKey, keyType string

	deps    requestDeps
	streams genericiooptions.IOStreams
}

// newRenewCommand is `kubectl rekey renew NAME [--name NEW] [--new-key
// FILE | --key FILE] ...`.
func newRenewCommand(deps requestDeps, streams genericiooptions.IOStreams) *cobra.Command {
	o := &renewOptions{deps: deps, streams: streams}
	cmd := &cobra.Command{
		Use:   "renew NAME [--name NEW_NAME] [--new-key FILE | --key FILE] [--approve] [--wait[=TIMEOUT]] [--out FILE] [--kubeconfig-out FILE]",
		Short: "Request a new certificate with the same template as an earlier request",
		Long: `Create a new rekey CertificateSigningRequest with the template of request
NAME: the same signer, usages, duration asked for, subject and subject
alternative names. It is named NEW_NAME (--name) or NAME-<5 random
characters> (metadata.generateName). NAME itself is only read; it may be
issued, failed or pending.

Without --new-key or --key the new request is NAME's PKCS#10 request again
(the same key: a new certificate for a key you keep). --new-key FILE makes
a new key (--key-type, default ecdsa-p256; written with mode 0600, never
over an existing file) and --key FILE uses another existing key; the
subject (byte for byte) and the subject alternative names are NAME's.

--approve, --wait, --out and --kubeconfig-out are those of "kubectl rekey
request" (--kubeconfig-out needs the key: --new-key or --key).

TPM-attested requests (rekey-agent's) cannot be renewed here: their
evidence answers a challenge that is spent; rekey-agent renews them.`,
		Example: `  kubectl rekey renew alice --approve --wait --out alice.crt
  kubectl rekey renew alice --name alice-2027 --new-key alice-2027.key --approve --wait --kubeconfig-out alice.kubeconfig`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(contextOf(cmd), args[0])
		},
		// NAME is completed by the Completer (completion.go).
	}
	fs := cmd.Flags()
	fs.StringVar(&o.name, "name", "", "the new request's name (default: NAME-<5 random characters>)")
	fs.StringVar(&o.newKey, "new-key", "", "make a new private key for the new request and write it to this file (mode 0600)")
	fs.StringVar(&o.keyType, "key-type", "ecdsa-p256", "with --new-key: "+strings.Join(keyTypeNames(), ", "))
	fs.StringVar(&o.keyFile, "key", "", "an existing private key (PEM) for the new request")
	o.fetchOptions.addFlags(cmd)
	_ = cmd.RegisterFlagCompletionFunc("key-type", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return keyTypeNames(), cobra.ShellCompDirectiveNoFileComp
	})
	return cmd
}

func (o *renewOptions) run(ctx context.Context, name string) error {
	if o.newKey != "" && o.keyFile != "" {
		return errors.New("--new-key makes the key: it does not go with --key")
	}
	client, err := o.deps.newClient()
	if err != nil {
		return err
	}
	old, err := client.CertificatesV1alpha1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("cannot read certificatesigningrequest %q: %s", name, statusMessage(err))
	}
	blocks, err := strictpem.Decode(old.Spec.Request, 3)
	if err != nil || len(blocks) == 0 || blocks[0].Type != "CERTIFICATE REQUEST" {
		return fmt.Errorf("certificatesigningrequest %q: spec.request is not a PEM PKCS#10 request", name)
	}
	if len(blocks) > 1 {
		return fmt.Errorf("certificatesigningrequest %q carries TPM attestation evidence, which answered a challenge that is spent: rekey-agent renews such certificates", name)
	}
	oldReq, err := requestOf(old)
	if err != nil {
		return fmt.Errorf("certificatesigningrequest %q: %w", name, err)
	}
	var key crypto.Signer
	request := old.Spec.Request
	writeKey := false
	switch {
	case o.newKey != "":
		if _, err := os.Lstat(o.newKey); err == nil {
			return fmt.Errorf("--new-key %s exists; refusing to overwrite a private key: use --key %s to renew with it, or remove it", o.newKey, o.newKey)
		}
		gen, ok := keyTypes[o.keyType]
		if !ok {
			return fmt.Errorf("--key-type %q: one of %s", o.keyType, strings.Join(keyTypeNames(), ", "))
		}
		if key, err = gen(); err != nil {
			return fmt.Errorf("making a %s key: %w", o.keyType, err)
		}
		writeKey = true
	case o.keyFile != "":
		data, err := readSmallFile("--key", o.keyFile)
		if err != nil {
			return err
		}
		if key, err = parsePrivateKeyPEM("--key", o.keyFile, data); err != nil {
			return err
		}
	}
	if key != nil {
		if request, err = createRequestPEM(templateOf(oldReq), key); err != nil {
			return err
		}
	}
	if err := o.fetchOptions.check(key, o.newKey, o.keyFile); err != nil {
		return err
	}
	csr := &certv1alpha1.CertificateSigningRequest{
		Spec: certv1alpha1.CertificateSigningRequestSpec{
			Request: request, SignerName: old.Spec.SignerName, ExpirationSeconds: old.Spec.ExpirationSeconds, Usages: old.Spec.Usages,
		},
	}
	if o.name != "" {
		csr.Name = o.name
	} else {
		csr.GenerateName = name + "-"
	}
	if writeKey {
		if err := writeNewKey(o.newKey, key); err != nil {
			return err
		}
	}
	created, err := create(ctx, client, csr)
	if err != nil {
		if writeKey {
			_ = os.Remove(o.newKey)
		}
		return err
	}
	return o.fetchOptions.fetch(ctx, o.deps, client, created, false, key, o.streams)
}

func create(ctx context.Context, client clientset.Interface, csr *certv1alpha1.CertificateSigningRequest) (*certv1alpha1.CertificateSigningRequest, error) {
	created, err := client.CertificatesV1alpha1().CertificateSigningRequests().Create(ctx, csr, metav1.CreateOptions{FieldManager: "kubectl-rekey"})
	if err != nil {
		name := csr.Name
		if name == "" {
			name = csr.GenerateName + "*"
		}
		return nil, fmt.Errorf("cannot create certificatesigningrequest %q: %s", name, statusMessage(err))
	}
	return created, nil
}
