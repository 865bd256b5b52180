package monitoringcheck

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"text/template"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/promql/parser"
	webhookmetrics "k8s.io/apiserver/plugin/pkg/authorizer/webhook/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
	"sigs.k8s.io/yaml"

	"rekey.io/rekey/pkg/agent"
	"rekey.io/rekey/pkg/controller/certificateauthority"
	"rekey.io/rekey/pkg/controller/credential"
	"rekey.io/rekey/pkg/controller/signer"
	"rekey.io/rekey/pkg/crl"
	"rekey.io/rekey/pkg/issuer"
	"rekey.io/rekey/pkg/jwtsigner"
	"rekey.io/rekey/pkg/revocation"
)

const (
	rulesFile     = "../../artifacts/monitoring/rekey-alerts.yaml"
	dashboardFile = "../../artifacts/monitoring/rekey-dashboard.json"
	repoRoot      = "../.."
)

// registerExported registers, in this process's /metrics registry, every
// metric rekey-apiserver and rekey-agent register (each package's own
// RegisterMetrics, as the binaries call them), and kube-apiserver's
// authorization webhook metrics, which the revocation alerts read.
func registerExported() {
	agent.RegisterMetrics()
	jwtsigner.RegisterMetrics()
	certificateauthority.RegisterMetrics()
	credential.RegisterMetrics()
	signer.RegisterMetrics()
	issuer.RegisterMetrics()
	crl.RegisterMetrics()
	revocation.RegisterMetrics()
	webhookmetrics.RegisterWebhookMetrics()
}

// exported says whether a metric of this name is registered. A vector with
// no series yet is left out of a scrape, so the registry itself is asked:
// registering a probe of that name fails when one is there (with another
// help text, the registry refuses a second descriptor of the name), and is
// undone when not. A histogram's series (_bucket, _sum, _count) are
// registered under its own name.
func exported(name string) bool {
	candidates := []string{name}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok {
			candidates = append(candidates, base)
		}
	}
	for _, n := range candidates {
		probe := prometheus.NewGauge(prometheus.GaugeOpts{Name: n, Help: "monitoringcheck probe"})
		if err := legacyregistry.Registerer().Register(probe); err != nil {
			return true
		}
		legacyregistry.Registerer().Unregister(probe)
	}
	return false
}

// grafanaVariables are what Grafana puts in an expression before it sends
// it; any valid value does to parse it.
var grafanaVariables = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h")

// checkExpr parses expr and returns the metrics it names that nobody
// exports (or the parse error).
func checkExpr(expr string) error {
	parsed, err := parser.NewParser(parser.Options{}).ParseExpr(grafanaVariables.Replace(expr))
	if err != nil {
		return fmt.Errorf("does not parse: %w", err)
	}
	var names []string
	parser.Inspect(parsed, func(node parser.Node, _ []parser.Node) error {
		if vs, ok := node.(*parser.VectorSelector); ok {
			name := vs.Name
			if name == "" {
				// {__name__="..."}: the name as a matcher.
				for _, m := range vs.LabelMatchers {
					if m.Name == "__name__" {
						name = m.Value
					}
				}
			}
			names = append(names, name)
		}
		return nil
	})
	if len(names) == 0 {
		return errors.New("names no metric")
	}
	var missing []string
	for _, n := range names {
		if !exported(n) {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("names metrics that neither rekey-apiserver, rekey-agent nor kube-apiserver exports: %s", strings.Join(missing, ", "))
	}
	return nil
}

// The check itself: a name nobody registers is refused, a registered
// vector without a series (and a histogram's buckets) is found, and an
// expression that does not parse is refused.
func TestCheckExprRefusesWhatIsNotExported(t *testing.T) {
	registerExported()
	if err := checkExpr(`rekey_signer_ready == 0`); err != nil {
		t.Errorf("a registered gauge: %v", err)
	}
	if err := checkExpr(`histogram_quantile(0.99, sum by (le) (rate(rekey_revocation_webhook_duration_seconds_bucket[5m])))`); err != nil {
		t.Errorf("a registered histogram's buckets: %v", err)
	}
	if err := checkExpr(`rekey_ca_not_exported_by_anyone_seconds > 0`); err == nil || !strings.Contains(err.Error(), "rekey_ca_not_exported_by_anyone_seconds") {
		t.Errorf("a metric nobody exports: %v", err)
	}
	if err := checkExpr(`sum by (ca) (rekey_signer_ready`); err == nil {
		t.Error("an expression that does not parse was accepted")
	}
	// The probe leaves nothing registered behind.
	if exported("rekey_ca_not_exported_by_anyone_seconds") {
		t.Error("the probe registered the name it asked about")
	}
}

type ruleFile struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name   string            `json:"name"`
		Labels map[string]string `json:"labels"`
	} `json:"metadata"`
	Spec struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []struct {
				Alert       string            `json:"alert"`
				Record      string            `json:"record"`
				Expr        string            `json:"expr"`
				For         string            `json:"for"`
				Labels      map[string]string `json:"labels"`
				Annotations map[string]string `json:"annotations"`
			} `json:"rules"`
		} `json:"groups"`
	} `json:"spec"`
}

// templateHeader is what Prometheus puts before an alert's annotation
// templates: the variables they may use.
const templateHeader = "{{$labels := .Labels}}{{$externalLabels := .ExternalLabels}}{{$externalURL := .ExternalURL}}{{$value := .Value}}"

// templateFuncs are the functions of Prometheus's alert templates (no-ops
// here: only whether a template parses is checked).
var templateFuncs = func() template.FuncMap {
	m := template.FuncMap{}
	for _, name := range []string{"humanize", "humanize1024", "humanizeDuration", "humanizePercentage", "humanizeTimestamp",
		"toTime", "title", "toUpper", "toLower", "match", "reReplaceAll", "label", "value", "first", "sortByLabel",
		"query", "args", "safeHtml", "stripPort", "stripDomain", "graphLink", "tableLink", "pathPrefix", "externalURL", "parseDuration", "urlUnescape"} {
		m[name] = func(...any) any { return nil }
	}
	return m
}()

// The PrometheusRule: every group and alert well-formed, every expression
// parses and names only exported metrics, every alert says what happened,
// how bad, and where its runbook is, and that section exists.
func TestAlertsParseAndNameExportedMetrics(t *testing.T) {
	registerExported()
	data, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var f ruleFile
	if err := yaml.UnmarshalStrict(data, &f); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	if f.APIVersion != "monitoring.coreos.com/v1" || f.Kind != "PrometheusRule" {
		t.Fatalf("%s is a %s %s, want a monitoring.coreos.com/v1 PrometheusRule", rulesFile, f.APIVersion, f.Kind)
	}
	alerts := map[string]bool{}
	for _, g := range f.Spec.Groups {
		if g.Name == "" || len(g.Rules) == 0 {
			t.Errorf("group %q: a group needs a name and rules", g.Name)
		}
		for _, r := range g.Rules {
			if r.Alert == "" {
				t.Errorf("group %s: a rule without alert (record %q)", g.Name, r.Record)
				continue
			}
			if alerts[r.Alert] {
				t.Errorf("alert %s appears twice", r.Alert)
			}
			alerts[r.Alert] = true
			if err := checkExpr(r.Expr); err != nil {
				t.Errorf("alert %s: %v", r.Alert, err)
			}
			if s := r.Labels["severity"]; s != "warning" && s != "critical" {
				t.Errorf("alert %s: severity %q, want warning or critical", r.Alert, s)
			}
			for _, key := range []string{"summary", "description", "runbook"} {
				if r.Annotations[key] == "" {
					t.Errorf("alert %s: no %s annotation", r.Alert, key)
				}
			}
			for key, text := range r.Annotations {
				if _, err := template.New(key).Funcs(templateFuncs).Parse(templateHeader + text); err != nil {
					t.Errorf("alert %s: annotation %s: %v", r.Alert, key, err)
				}
			}
			if err := checkRunbook(r.Annotations["runbook"]); err != nil {
				t.Errorf("alert %s: runbook: %v", r.Alert, err)
			}
		}
	}
	// What the issue asks to be alerted on, each by at least one alert.
	for _, want := range []string{"RekeyCACertificateExpiringSoon", "RekeyCARotationStuck", "RekeyCAPendingRenewalsNearExpiry",
		"RekeyAgentRenewalErrors", "RekeyAgentCertificateExpired", "RekeySignerNotReady", "RekeyCredentialDegraded",
		"RekeyCredentialCertificateExpired", "RekeyRevocationWebhookFailing", "RekeyRevocationFailingOpen"} {
		if !alerts[want] {
			t.Errorf("no alert %s", want)
		}
	}
}

// checkRunbook: "docs/FILE.md#anchor", a file of the repository with a
// heading of that anchor.
func checkRunbook(ref string) error {
	path, anchor, ok := strings.Cut(ref, "#")
	if !ok || !strings.HasPrefix(path, "docs/") || anchor == "" {
		return fmt.Errorf("%q is not docs/FILE.md#section", ref)
	}
	data, err := os.ReadFile(filepath.Join(repoRoot, path))
	if err != nil {
		return err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if heading, ok := strings.CutPrefix(line, "#"); ok && slug(strings.TrimLeft(heading, "#")) == anchor {
			return nil
		}
	}
	return fmt.Errorf("%s has no heading whose anchor is #%s", path, anchor)
}

var notInSlug = regexp.MustCompile(`[^\p{L}\p{N} _-]`)

// slug is a heading's anchor as GitHub makes it.
func slug(heading string) string {
	s := notInSlug.ReplaceAllString(strings.ToLower(strings.TrimSpace(heading)), "")
	return strings.ReplaceAll(s, " ", "-")
}

type dashboardPanel struct {
	Title   string           `json:"title"`
	Panels  []dashboardPanel `json:"panels"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

var labelValues = regexp.MustCompile(`^label_values\((.+),\s*[a-zA-Z_][a-zA-Z0-9_]*\)$`)

// The Grafana dashboard: every panel's queries, and every variable's,
// parse and name only exported metrics.
func TestDashboardQueriesNameExportedMetrics(t *testing.T) {
	registerExported()
	data, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Title      string           `json:"title"`
		UID        string           `json:"uid"`
		Panels     []dashboardPanel `json:"panels"`
		Templating struct {
			List []struct {
				Name  string          `json:"name"`
				Type  string          `json:"type"`
				Query json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if d.Title == "" || d.UID == "" {
		t.Errorf("dashboard title %q, uid %q: both are needed to import it", d.Title, d.UID)
	}
	queries := 0
	var walk func([]dashboardPanel)
	walk = func(panels []dashboardPanel) {
		for _, p := range panels {
			walk(p.Panels)
			for _, target := range p.Targets {
				queries++
				if err := checkExpr(target.Expr); err != nil {
					t.Errorf("panel %q: %s: %v", p.Title, target.Expr, err)
				}
			}
		}
	}
	walk(d.Panels)
	if queries == 0 {
		t.Fatal("the dashboard has no queries")
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			// The older form: the query as a string.
			if err := json.Unmarshal(v.Query, &q.Query); err != nil {
				t.Errorf("variable %s: query %s", v.Name, v.Query)
				continue
			}
		}
		expr := q.Query
		if m := labelValues.FindStringSubmatch(expr); m != nil {
			expr = m[1]
		}
		if err := checkExpr(expr); err != nil {
			t.Errorf("variable %s: %s: %v", v.Name, q.Query, err)
		}
	}
}

// Every alert has its own section in operations.md (Alerts and dashboards),
// which its runbook annotation names.
func TestEveryAlertHasItsDocsSection(t *testing.T) {
	data, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var f ruleFile
	if err := yaml.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	for _, g := range f.Spec.Groups {
		for _, r := range g.Rules {
			want := "docs/operations.md#" + strings.ToLower(r.Alert)
			if r.Annotations["runbook"] != want {
				t.Errorf("alert %s: runbook %q, want %q (its own section of Alerts and dashboards)", r.Alert, r.Annotations["runbook"], want)
			}
		}
	}
}
