package plugin

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/spf13/cobra"
	apimachineryversion "k8s.io/apimachinery/pkg/version"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

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
	var output string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version and commit of kubectl rekey and of the rekey-apiserver it talks to",
		Example: `  kubectl rekey version
  kubectl rekey version --client
  kubectl rekey version -o json`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if output != "" && output != "json" && output != "yaml" {
				return fmt.Errorf("--output must be json or yaml, not %q", output)
			}
			client := version.Get()
			if output == "" {
				fmt.Fprintf(streams.Out, "Client Version: %s\n", client)
			}
			var server string
			var serverErr error
			if !clientOnly {
				var cfg *rest.Config
				if cfg, serverErr = restConfig(); serverErr == nil {
					server, serverErr = serverVersion(c.Context(), cfg)
				}
			}
			if output != "" {
				// As kubectl version -o prints it: the client's (and
				// the server's, when known) version.Info fields.
				doc := versionOutput{ClientVersion: client.Kubernetes()}
				if server != "" && serverErr == nil {
					doc.ServerVersion = &serverVersionInfo{GitVersion: server}
				}
				if err := printVersionDoc(streams.Out, output, doc); err != nil {
					return err
				}
				return serverErr
			}
			if clientOnly || serverErr != nil {
				return serverErr
			}
			if server == "" {
				server = "unknown (the server's discovery sends no " + filters.VersionHeader + " header: a rekey-apiserver older than v0.1.0's version stamping)"
			}
			fmt.Fprintf(streams.Out, "Server Version: %s\n", server)
			return nil
		},
	}
	cmd.Flags().BoolVar(&clientOnly, "client", false, "Print only the plugin's version; do not contact the server.")
	cmd.Flags().StringVarP(&output, "output", "o", "", "One of 'yaml' or 'json' (as kubectl version -o).")
	return cmd
}

// versionOutput is what -o json|yaml prints, shaped as kubectl version's.
type versionOutput struct {
	ClientVersion apimachineryversion.Info `json:"clientVersion"`
	// ServerVersion is omitted with --client and for a server older than
	// the Rekey-Version header.
	ServerVersion *serverVersionInfo `json:"serverVersion,omitempty"`
}

// serverVersionInfo holds what rekey's discovery tells of the server: its
// Rekey-Version header.
type serverVersionInfo struct {
	GitVersion string `json:"gitVersion"`
}

func printVersionDoc(out io.Writer, format string, doc versionOutput) error {
	var data []byte
	var err error
	if format == "json" {
		data, err = json.MarshalIndent(doc, "", "  ")
		data = append(data, '\n')
	} else {
		data, err = yaml.Marshal(doc)
	}
	if err != nil {
		return fmt.Errorf("encoding the version as %s: %w", format, err)
	}
	_, err = out.Write(data)
	return err
}

// serverVersion asks for rekey's discovery document of
// certificates.rekey.io and returns the version its Rekey-Version header
// names, "" when it has none.
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
	// "" when the header is absent (a server older than the header).
	return resp.Header.Get(filters.VersionHeader), nil
}
