package plugin

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/rest"

	"rekey.io/rekey/pkg/apiserver/filters"
	"rekey.io/rekey/pkg/version"
)

func TestVersionCommand(t *testing.T) {
	versioned := filters.WithVersionHeader(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/apis/certificates.rekey.io/v1alpha1" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte(`{"kind":"APIResourceList"}`))
	}), "v9.8.7+0123456789ab")
	// The server sets the header for authenticated users only: stand in
	// for its authentication filter.
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		versioned.ServeHTTP(w, r.WithContext(genericapirequest.WithUser(r.Context(), &user.DefaultInfo{Name: "alice", Groups: []string{user.AllAuthenticated}})))
	}))
	defer srv.Close()
	cfg := &rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true}}
	run := func(args ...string) (string, error) {
		var out bytes.Buffer
		cmd := newVersionCommand(func() (*rest.Config, error) { return cfg, nil }, genericiooptions.IOStreams{Out: &out, ErrOut: &out})
		cmd.SetArgs(args)
		cmd.SilenceUsage, cmd.SilenceErrors = true, true
		cmd.SetOut(&out)
		err := cmd.Execute()
		return out.String(), err
	}
	client := "Client Version: " + version.Get().String() + "\n"

	out, err := run()
	if err != nil || out != client+"Server Version: v9.8.7+0123456789ab\n" {
		t.Fatalf("version: %v\n%s", err, out)
	}
	if out, err := run("--client"); err != nil || out != client {
		t.Fatalf("version --client: %v\n%s", err, out)
	}
	// -o json and -o yaml, as kubectl version has them.
	out, err = run("-o", "json")
	var got struct {
		ClientVersion struct{ GitVersion string }  `json:"clientVersion"`
		ServerVersion *struct{ GitVersion string } `json:"serverVersion"`
	}
	if err != nil || json.Unmarshal([]byte(out), &got) != nil || got.ClientVersion.GitVersion != version.Get().GitVersion() ||
		got.ServerVersion == nil || got.ServerVersion.GitVersion != "v9.8.7+0123456789ab" {
		t.Fatalf("-o json: %v\n%s", err, out)
	}
	if out, err := run("-o", "yaml"); err != nil || !strings.Contains(out, "serverVersion:\n  gitVersion: v9.8.7+0123456789ab\n") || !strings.Contains(out, "clientVersion:\n") {
		t.Fatalf("-o yaml: %v\n%s", err, out)
	}
	if out, err := run("--client", "-o", "json"); err != nil || strings.Contains(out, "serverVersion") || !strings.Contains(out, `"clientVersion"`) {
		t.Fatalf("--client -o json: %v\n%s", err, out)
	}
	if _, err := run("-o", "wide"); err == nil || !strings.Contains(err.Error(), "--output") {
		t.Fatalf("-o wide: %v", err)
	}
	srv.Close()
	if out, err := run(); err == nil || out != client {
		t.Fatalf("server gone: %v\n%s", err, out)
	}

	old := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(`{}`)) }))
	defer old.Close()
	cfg.Host = old.URL
	if out, err := run(); err != nil || !strings.Contains(out, "Server Version: unknown") {
		t.Fatalf("a server without the header: %v\n%s", err, out)
	}
}
