package plugin

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/rest"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	"rekey.io/rekey/pkg/apiserver/filters"
	"rekey.io/rekey/pkg/version"
)

// newVersionCommand is `kubectl rekey version`: this plugin's version and
// the rekey-apiserver's. The server's comes from the Rekey-Version header
// of rekey's discovery document, not /version: behind the aggregation
// layer /version is kube-apiserver's.
func newVersionCommand(restConfig func() (*rest.Config, error), streams genericiooptions.IOStreams) *cobra.Command {
	var clientOnly bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version and commit of kubectl rekey and of the rekey-apiserver it talks to",
		Example: `  kubectl rekey version
  kubectl rekey version --client`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			fmt.Fprintf(streams.Out, "Client Version: %s\n", version.Get())
			if clientOnly {
				return nil
			}
			cfg, err := restConfig()
			if err != nil {
				return err
			}
			server, err := serverVersion(c.Context(), cfg)
			if err != nil {
				return err
			}
			fmt.Fprintf(streams.Out, "Server Version: %s\n", server)
			return nil
		},
	}
	cmd.Flags().BoolVar(&clientOnly, "client", false, "Print only the plugin's version; do not contact the server.")
	return cmd
}

// serverVersion asks for rekey's discovery document of
// certificates.rekey.io and returns the version its Rekey-Version header
// names.
func serverVersion(ctx context.Context, cfg *rest.Config) (string, error) {
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return "", fmt.Errorf("building an HTTP client from the kubeconfig: %w", err)
	}
	path := "/apis/" + certv1alpha1.SchemeGroupVersion.String()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(cfg.Host, "/")+strings.TrimSuffix(cfg.APIPath, "/")+path, nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return "", fmt.Errorf("asking the server for its version: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s (is rekey installed and are you allowed discovery?)", path, resp.Status)
	}
	v := resp.Header.Get(filters.VersionHeader)
	if v == "" {
		return "unknown (the server's discovery sends no " + filters.VersionHeader + " header: a rekey-apiserver older than v0.1.0's version stamping)", nil
	}
	return v, nil
}
